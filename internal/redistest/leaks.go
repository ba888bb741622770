package redistest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakGrace is how long Main lets goroutines wind down after the tests:
// a test's servers and clients close asynchronously, and on a loaded
// two-core machine under -race that takes more than goleak's own retries
// (about 0.4 s) now and then.
const leakGrace = 5 * time.Second

// LongLived are the goroutines a test process keeps by design, for goleak
// to ignore: go-redis's circuit-breaker cleanup loop (go-redis starts one
// per connection pool for maintenance notifications, and one can outlive
// its closed client, as seen while tests kill and restart servers: it is
// go-redis's goroutine, not ours), and the wait for the process's exit
// anchor (package exitorder), which lives as long as the process.
var LongLived = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
	goleak.IgnoreAnyFunction("github.com/headcount/headcount/pkg/exitorder.waitChild"),
	goleak.IgnoreAnyFunction("github.com/headcount/headcount/pkg/exitorder.watch"),
}

// Main runs a package's tests, then fails the run if any goroutine but
// LongLived is still running leakGrace later. Packages call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		err := goleak.Find(LongLived...)
		for deadline := time.Now().Add(leakGrace); err != nil && time.Now().Before(deadline); err = goleak.Find(LongLived...) {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests by %v: %v\n", leakGrace, err)
			code = 1
		}
	}
	os.Exit(code)
}
