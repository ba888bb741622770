package lifecycle

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:1": true, "[::1]:8080": true, "localhost:1": true,
		"[::]:8080": false, "0.0.0.0:8080": false, ":8080": false, "10.0.0.7:6001": false,
		"[fe80::1%eth0]:1": false, "example.com:80": false, "nonsense": false,
	} {
		require.Equal(t, want, Loopback(addr), addr)
	}
}

func envOf(m map[string]string) apps.Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestWarnPublicSecrets: a published secret on a port other hosts reach is
// a warning naming the fix; on loopback, or with secrets of one's own,
// nothing is logged.
func TestWarnPublicSecrets(t *testing.T) {
	defaults, err := apps.FromEnv(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	placeholder, err := apps.New([]*apps.App{{ID: "mine", Key: "k", Secret: "s"}, {ID: "my-app", Key: "replace-this-key", Secret: "replace-this-secret"}})
	require.NoError(t, err)
	own, err := apps.FromEnv(envOf(map[string]string{"HEADCOUNT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": "s3cret"}))
	require.NoError(t, err)
	idDefault, err := apps.FromEnv(envOf(map[string]string{"HEADCOUNT_APP_KEY": apps.DefaultKey, "HEADCOUNT_APP_SECRET": "s3cret"}))
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		reg  *apps.Registry
		addr string
		want string // "" for silence
	}{
		{"defaults on every interface", defaults, "[::]:6001", "app_ids=app-id"},
		{"defaults on a pod address", defaults, "10.0.0.7:8080", "app_ids=app-id"},
		{"example placeholder", placeholder, "0.0.0.0:8080", "app_ids=my-app"},
		{"defaults on loopback", defaults, "127.0.0.1:6001", ""},
		{"defaults on IPv6 loopback", defaults, "[::1]:6001", ""},
		{"own secret", own, "[::]:6001", ""},
		{"default key, own secret", idDefault, "[::]:6001", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			WarnPublicSecrets(hclog.New(&hclog.LoggerOptions{Output: &buf}), tc.reg, "--addr", tc.addr)
			if tc.want == "" {
				require.Empty(t, buf.String())
				return
			}
			out := buf.String()
			require.Contains(t, out, "[WARN]")
			require.Contains(t, out, tc.want)
			require.Contains(t, out, "HEADCOUNT_APP_KEY and HEADCOUNT_APP_SECRET")
			require.Contains(t, out, "--apps-file")
			require.Contains(t, out, "setting=--addr addr="+tc.addr)
		})
	}
}

// TestWarnIgnoredAppFields: each soketi setting the apps file holds and
// headcount ignores is a warning naming the field and the app.
func TestWarnIgnoredAppFields(t *testing.T) {
	reg, err := apps.Parse([]byte(`[{"id":"a","key":"k","secret":"s","maxEventNameLength":50}]`))
	require.NoError(t, err)
	var buf bytes.Buffer
	WarnIgnoredAppFields(hclog.New(&hclog.LoggerOptions{Output: &buf}), reg)
	require.Contains(t, buf.String(), `[WARN]  apps file: app "a": field maxEventNameLength is a soketi setting headcount does not implement`)

	buf.Reset()
	quiet, err := apps.Parse([]byte(`[{"id":"a","key":"k","secret":"s"}]`))
	require.NoError(t, err)
	WarnIgnoredAppFields(hclog.New(&hclog.LoggerOptions{Output: &buf}), quiet)
	require.Empty(t, buf.String())
}
