package httpapi

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
)

// TestWarnsOfPublicSecretBeyondLoopback: with the default app (secret
// app-secret), an API listening on every interface warns at start and
// names the fix; on loopback, as in `make run` and the tests, it does not.
func TestWarnsOfPublicSecretBeyondLoopback(t *testing.T) {
	t.Parallel()
	defaults, err := apps.FromEnv(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	for addr, warns := range map[string]bool{"127.0.0.1:0": false, "[::1]:0": false, "0.0.0.0:0": true} {
		var out bytes.Buffer
		a, err := New(Options{
			Config: config.HTTPAPI{Common: config.Common{Redis: "redis://127.0.0.1:1/0", Apps: defaults}, Addr: addr},
			Logger: hclog.New(&hclog.LoggerOptions{Output: &out}),
		})
		if err != nil && addr == "[::1]:0" {
			t.Logf("no IPv6 loopback here: %v", err)
			continue
		}
		require.NoError(t, err)
		a.Stop() // New alone logs the warning; nothing dials Redis
		if !warns {
			require.Empty(t, out.String(), addr)
			continue
		}
		require.Contains(t, out.String(), "[WARN]  httpapi: INSECURE: apps use a secret published with headcount while --addr is reachable from other hosts")
		require.Contains(t, out.String(), "Set HEADCOUNT_APP_KEY and HEADCOUNT_APP_SECRET, or give --apps-file")
		require.Contains(t, out.String(), "app_ids=app-id")
	}
}
