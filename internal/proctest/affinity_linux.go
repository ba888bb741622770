package proctest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// SplitCPUs divides the machine's CPUs in two halves for a benchmark that
// keeps its load tool off the cores of the servers it measures: servers
// gets the first half, load the rest. ok is false on a one-CPU machine.
func SplitCPUs() (servers, load []int, ok bool) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, nil, false
	}
	var cpus []int
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return nil, nil, false
	}
	return cpus[:len(cpus)/2], cpus[len(cpus)/2:], true
}

// Pin restricts every thread of process pid to cpus; threads it starts
// later inherit the set from the thread that starts them. A benchmark pins
// its own process back to all of SplitCPUs' CPUs when it is done.
func Pin(tb testing.TB, pid int, cpus []int) {
	tb.Helper()
	var want unix.CPUSet
	for _, c := range cpus {
		want.Set(c)
	}
	for _, tid := range threads(tb, pid) {
		// A thread that ended meanwhile is the only expected failure.
		_ = unix.SchedSetaffinity(tid, &want)
	}
}

// threads lists a process's thread ids from /proc.
func threads(tb testing.TB, pid int) []int {
	tb.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		tb.Fatalf("threads of %d: %v", pid, err)
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out
}

// Favor gives every thread of process pid the highest scheduling priority
// (nice -20) if this process may, so a server measured on a machine that
// runs other work is preempted less; without the privilege it does
// nothing.
func Favor(tb testing.TB, pid int) {
	tb.Helper()
	for _, tid := range threads(tb, pid) {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, -20)
	}
}
