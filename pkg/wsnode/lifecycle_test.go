package wsnode_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/lifecycletest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/wsnode"
)

// TestLifecycle: a node keeps the lifecycle every app shares, built with
// no logger and no registry.
func TestLifecycle(t *testing.T) {
	// Not parallel: it checks that no goroutine outlives the app, and
	// other tests' goroutines would count.
	srv := redistest.New(t)
	lifecycletest.Contract(t, func(t *testing.T) lifecycletest.Subject {
		cfg := config.WSNode{
			Common:    config.Common{Redis: srv.URL(), AdminAddr: "127.0.0.1:0", Apps: testApps(t)},
			Addr:      "127.0.0.1:0",
			NodeID:    "node-" + strings.ReplaceAll(t.Name(), "/", "-"),
			Heartbeat: 100 * time.Millisecond,
			Drain:     100 * time.Millisecond,
		}
		a, err := wsnode.New(wsnode.Options{Config: cfg})
		require.NoError(t, err)
		return lifecycletest.Subject{Service: a, Addrs: []string{a.Addr(), a.AdminAddr()}, Redis: a.Redis()}
	})
}
