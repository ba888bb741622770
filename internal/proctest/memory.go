package proctest

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SettledRSS reads a process's resident memory once two readings 500 ms
// apart agree within 1% (the Go runtime returns freed memory lazily), or
// the last reading after 20 s.
func SettledRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	prev := RSS(tb, pid)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		cur := RSS(tb, pid)
		if d := cur - prev; d < prev/100 && -d < prev/100 {
			return cur
		}
		prev = cur
	}
	return prev
}

// RSS is a process's resident memory in bytes (VmRSS).
func RSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	rest, ok := Status(pid, "VmRSS")
	if !ok || rest == "" {
		tb.Fatalf("process %d: no VmRSS", pid)
	}
	kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(rest, "kB")), 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return kb * 1024
}

// RaiseFileLimit lifts this process's open-file limit (inherited by the
// servers it starts) to fit n sockets on each side, and a wsnode's default
// --max-sockets (90% of the limit) to hold n. It returns how many sockets
// fit if the limit cannot be raised that far.
func RaiseFileLimit(tb testing.TB, n int) int {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	want := uint64(max(n+1000, n*10/9+100))
	if lim.Cur >= want {
		return n
	}
	lim.Cur = want
	if lim.Max < want {
		lim.Max = want // allowed as root
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
		tb.Logf("cannot raise the open-file limit to %d (%v): measuring %d sockets", want, err, int(lim.Cur)-1000)
		return int(lim.Cur) - 1000
	}
	return n
}
