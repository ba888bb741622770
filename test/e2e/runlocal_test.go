package e2e

// runlocal_test.go: what make run (scripts/run-local.sh) starts.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/protocol"
)

// TestRunAppsFile reads the apps file make run writes (scripts/run-apps.sh)
// the way the binaries read it: client events and subscription_count are
// on, so what docs/DESIGN.md's three binaries list works in the demo, and the demo
// room's channels have a capacity of 2.
func TestRunAppsFile(t *testing.T) {
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "run-apps.sh"))
	cmd.Env = append(os.Environ(), "HEADCOUNT_APP_ID=", "HEADCOUNT_APP_KEY=", "HEADCOUNT_APP_SECRET=", "RUN_ROOM_CAPACITY=")
	out, err := cmd.Output()
	require.NoError(t, err)
	reg, err := apps.Parse(out)
	require.NoError(t, err, "%s", out)
	require.Len(t, reg.All(), 1)
	app := reg.All()[0]
	require.Equal(t, "app-id", app.ID)
	require.Equal(t, "app-key", app.Key)
	require.True(t, app.EnableClientMessages, "client events off: a client event gets 'enable client messages'")
	require.True(t, app.EnableSubscriptionCount, "subscription_count off: none is ever sent")
	require.Equal(t, []apps.Capacity{{Prefix: "presence-room-", Capacity: 2}}, app.Capacities)
	require.Equal(t, protocol.KindPresence, protocol.ChannelKind("presence-room-demo"), "the room is a presence channel: capacities apply to those only")

	// The caller's credentials, quoted for JSON.
	cmd = exec.Command("bash", filepath.Join(repoRoot(t), "scripts", "run-apps.sh"))
	cmd.Env = append(os.Environ(), "HEADCOUNT_APP_ID=my-app", "HEADCOUNT_APP_KEY=k", `HEADCOUNT_APP_SECRET=s"\x`, "RUN_ROOM_CAPACITY=3")
	out, err = cmd.Output()
	require.NoError(t, err)
	reg, err = apps.Parse(out)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "my-app", reg.All()[0].ID)
	require.Equal(t, `s"\x`, reg.All()[0].Secret)
	require.Equal(t, 3, reg.All()[0].Capacities[0].Capacity)
}

// TestRunNamesMatchBanner: the names make run gives its processes
// (--node-id) are the ones its banner prints, so the dashboard's node and
// lease-holder names match what the terminal says; and its httpapi's
// stale-after is below its cleaners' dead-after.
func TestRunNamesMatchBanner(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "scripts", "run-local.sh"))
	require.NoError(t, err)
	script := string(b)
	// A hung node shows stale on the dashboard before the cleaners reap it.
	setting := func(name string) time.Duration {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)`).FindStringSubmatch(script)
		require.NotNil(t, m, "run-local.sh sets %s", name)
		d, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		return d
	}
	require.Less(t, setting("STALE_AFTER"), setting("DEAD_AFTER"), "stale-after below dead-after")
	require.Regexp(t, `--stale-after "\$STALE_AFTER"`, script)
	require.Regexp(t, `cleaner_flags=\(--dead-after "\$DEAD_AFTER"`, script)
	for _, name := range []string{"ws-a", "ws-b", "cleaner-1", "cleaner-2"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^start `+name+` bin/\w+ .*--node-id `+name+` `), script, "%s runs under its own name", name)
		require.Regexp(t, regexp.MustCompile(`(?m)^\s+row `+name+` `), script, "the banner prints %s", name)
	}
}

// TestRunInstallsOnlyWhatItRuns: `make run`'s dependency step
// (ensure-deps.sh run) asks for redis-server and nothing else: on a
// machine with redis but without Node.js it is content, where the tests'
// step (the default) says Node.js is missing. Installing is off
// (ENSURE_DEPS_NO_INSTALL), so the test changes nothing on the machine.
func TestRunInstallsOnlyWhatItRuns(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"redis-server", "redis-cli", "redis-sentinel", "bash", "dirname", "id"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, "bash"), append([]string{"scripts/ensure-deps.sh"}, args...)...)
		cmd.Dir = repoRoot(t)
		cmd.Env = []string{"PATH=" + bin, "ENSURE_DEPS_NO_INSTALL=1"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("run"); err != nil || out != "" {
		t.Fatalf("ensure-deps.sh run without Node.js: %v\n%s", err, out)
	}
	out, err := run()
	if err == nil || !strings.Contains(out, "node and npm are needed") {
		t.Fatalf("ensure-deps.sh (the tests' deps) without Node.js: %v\n%s", err, out)
	}
}
