package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// TestMain runs the binary's main instead of the tests when asked, so tests
// can check exit codes on a real process.
func TestMain(m *testing.M) {
	if os.Getenv("CLEANER_TEST_MAIN") == "1" {
		os.Args = append([]string{"cleaner"}, strings.Fields(os.Getenv("CLEANER_TEST_ARGS"))...)
		main()
		return
	}
	os.Exit(m.Run())
}

func noEnv(string) (string, bool) { return "", false }

func TestBadConfigExits2NamingTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dead-after", "soon"}, "dead-after"},
		{[]string{"--lease-ttl", "1ms"}, "--lease-ttl"},
		{[]string{"--redis", "nope://x"}, "--redis"},
		{[]string{"frobnicate"}, "frobnicate"},
		{[]string{"--redis", "nope://x", "audit"}, "--redis"},
		{[]string{"audit", "--fix"}, "-fix"},
		{[]string{"audit", "--repair", "now"}, "now"},
		{[]string{"audit", "--redis", "localhost:6379"}, "did you mean redis://localhost:6379?"},
		{[]string{"audit", "--repair", "--dead-after", "soon", "--lease-ttl", "1ms"}, "--lease-ttl"},
		{[]string{"version"}, `unknown command "version"`},
		{[]string{"--repair"}, "-repair: no such flag"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, noEnv, &stdout, &stderr)
		require.Equal(t, 2, code, "%v", tc.args)
		require.Contains(t, stderr.String(), tc.want)
	}
}

// TestAuditExitCodes runs `cleaner audit` against a real Redis (single and
// Cluster): 0 while the counts are consistent, 1 once a global count
// drifts, 1 again with --repair (drift was found) after repairing it, then
// 0; and 1 when Redis cannot be reached (nothing was proven).
func TestAuditExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		up   func(t *testing.T) (redis.UniversalClient, []string)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, []string) {
			srv := redistest.New(t)
			return srv.Client(t), []string{"--redis", srv.URL()}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []string) {
			if testing.Short() {
				t.Skip("cluster in -short")
			}
			c := redistest.NewCluster(t)
			return c.Client(t), []string{"--redis-cluster", c.Seeds()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, flags := tc.up(t)
			ctx := context.Background()
			audit := func(extra ...string) (int, string, string) {
				var stdout, stderr bytes.Buffer
				code := run(append(append([]string{"--admin-addr", ""}, flags...), extra...), noEnv, &stdout, &stderr)
				return code, stdout.String(), stderr.String()
			}

			for _, app := range []string{"app1", "app2"} {
				r := counts.NewRecorder(rdb, "n1", counts.RecorderOptions{Heartbeat: time.Hour})
				r.Add(app, "chat", 2)
				r.AddConnections(app, 2)
				require.NoError(t, r.Flush(ctx))
			}
			code, out, errs := audit("audit")
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errs)
			require.Contains(t, out, "consistent: 2 apps audited")
			// The form people type: the flags after the command.
			var stdout, stderr bytes.Buffer
			code = run(append([]string{"audit", "--admin-addr", ""}, flags...), noEnv, &stdout, &stderr)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			require.Contains(t, stdout.String(), "consistent: 2 apps audited")

			require.NoError(t, counts.CorruptChannel(ctx, rdb, keyspace.Space{}, "app2", "chat", 3))
			code, out, _ = audit("audit")
			require.Equal(t, 1, code)
			require.Regexp(t, `(?m)^APP\s+KIND\s+KEY\s+WANT\s+HAVE\n^app2\s+channel\s+chat\s+2\s+5\n`, out)
			require.Contains(t, out, "app app2: 1 differences")
			require.Contains(t, out, "drift found in 1 of 2 apps; `cleaner audit --repair` fixes it")
			require.NotContains(t, out, "app1")

			stdout.Reset()
			code = run(append([]string{"audit", "--repair", "--admin-addr", ""}, flags...), noEnv, &stdout, io.Discard)
			out = stdout.String()
			require.Equal(t, 1, code, "drift was found, even though it is repaired now")
			require.Contains(t, out, "repaired 1 entries; consistent now")
			require.Contains(t, out, "and repaired")
			n, err := counts.NewStore(rdb, keyspace.Space{}).Channel(ctx, "app2", "chat")
			require.NoError(t, err)
			require.EqualValues(t, 2, n)

			code, out, _ = audit("audit")
			require.Equal(t, 0, code, out)
		})
	}
}

func TestAuditFailsWithoutRedis(t *testing.T) {
	srv := redistest.New(t)
	url := srv.URL()
	srv.KillAndHold(t)
	var stdout, stderr bytes.Buffer
	code := run([]string{"--admin-addr", "", "--redis", url, "audit"}, noEnv, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "audit failed")
}

// TestAppCredentialsExit2 runs the binary's main with the default app's
// credential variables partly set, or set to "": it exits 2 naming the
// variable, instead of serving the published app-secret. With none set it
// gets past the configuration (here to a taken port: exit 1).
func TestAppCredentialsExit2(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	proctest.RequireCredentialExits(t, []string{"-test.run=^$"}, map[string]string{"CLEANER_TEST_MAIN": "1", "CLEANER_TEST_ARGS": "--admin-addr " + taken.Addr().String()}, "admin listener")
}
