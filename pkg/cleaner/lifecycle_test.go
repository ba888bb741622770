package cleaner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/lifecycletest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
)

// TestLifecycle: a cleaner keeps the lifecycle every app shares, built
// with no logger and no registry.
func TestLifecycle(t *testing.T) {
	// Not parallel: it checks that no goroutine outlives the app, and
	// other tests' goroutines would count.
	srv := redistest.New(t)
	lifecycletest.Contract(t, func(t *testing.T) lifecycletest.Subject {
		cfg := config.DefaultCleaner()
		cfg.Redis = srv.URL()
		cfg.AdminAddr = "127.0.0.1:0"
		cfg.LeaseTTL = 300 * time.Millisecond
		a, err := New(Options{Config: cfg})
		require.NoError(t, err)
		return lifecycletest.Subject{Service: a, Addrs: []string{a.AdminAddr()}, Redis: a.rdb}
	})
}
