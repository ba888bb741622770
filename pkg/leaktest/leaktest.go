// Package leaktest fails a test binary whose goroutines outlive its tests,
// as etcd's testutil does: a goroutine still running after every test has
// cleaned up is a leak the next deployment would have too.
package leaktest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs the tests and then, if they passed, fails the binary when any
// goroutine whose stack mentions one of suspects (e.g.
// "headcount/pkg/wsnode.") is still alive after a 5 s grace. Use it as
// TestMain's body.
func Main(m *testing.M, suspects ...string) {
	code := m.Run()
	if code == 0 {
		if err := Check(5*time.Second, suspects...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// Check polls until no goroutine other than the caller's mentions one of
// suspects, or returns the leaked stacks after wait.
func Check(wait time.Duration, suspects ...string) error {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for i, g := range strings.Split(string(buf), "\n\n") {
			if i == 0 {
				continue // runtime.Stack lists the caller first
			}
			for _, s := range suspects {
				if strings.Contains(g, s) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leaked goroutines:\n\n%s", strings.Join(leaked, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond) // a poll interval, not a wait for a condition
	}
}
