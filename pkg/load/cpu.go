package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpu reads process_cpu_seconds_total from every Admin address and the
// CPU time of every PID, keyed "pid:N".
func (r *run) cpu(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, pid := range r.cfg.PIDs {
		if v, err := pidCPU(pid); err == nil {
			out["pid:"+strconv.Itoa(pid)] = v
		}
	}
	for _, a := range r.cfg.Admin {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := r.http.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				out[a], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return out
}

// cpuSince is the CPU time spent between two readings of cpu, summed over
// the processes read both times; each one's share goes into each if
// that is not nil.
func cpuSince(after, before, each map[string]float64) float64 {
	total := 0.0
	for k, v := range after {
		if b, ok := before[k]; ok {
			total += v - b
			if each != nil {
				each[k] = v - b
			}
		}
	}
	return total
}

// pidCPU is a local process's CPU time in seconds (user + system, from
// /proc/PID/stat; Linux only).
func pidCPU(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is the first, utime the 12th, stime the 13th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
