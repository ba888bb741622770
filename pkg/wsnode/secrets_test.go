package wsnode_test

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/wsnode"
)

// TestWarnsOfPublicSecretBeyondLoopback: with the default app (secret
// app-secret), a node listening on every interface warns at start and
// names the fix; on loopback, as in `make run` and the tests, it does not.
func TestWarnsOfPublicSecretBeyondLoopback(t *testing.T) {
	// Not parallel: it wants no warning at all on loopback, and tests
	// beside it slow the liveness subscription into warning.
	srv := redistest.New(t)
	defaults, err := apps.FromEnv(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	for addr, warns := range map[string]bool{"127.0.0.1:0": false, "0.0.0.0:0": true} {
		var out proctest.Buffer
		n, err := wsnode.New(wsnode.Options{
			Config: config.WSNode{Common: config.Common{Redis: srv.URL(), Apps: defaults}, Addr: addr,
				NodeID: "node-warn", Heartbeat: 100 * time.Millisecond, Drain: 100 * time.Millisecond},
			Logger: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info}),
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		require.Eventually(t, n.Ready, wait, tick)
		cancel()
		require.NoError(t, <-done)
		if !warns {
			require.NotContains(t, out.String(), "[WARN]", addr)
			continue
		}
		require.Contains(t, out.String(), "[WARN]  wsnode: INSECURE: apps use a secret published with headcount while --addr is reachable from other hosts", addr)
		require.Contains(t, out.String(), "Set HEADCOUNT_APP_KEY and HEADCOUNT_APP_SECRET, or give --apps-file")
		require.Contains(t, out.String(), "app_ids=app-id")
	}
}
