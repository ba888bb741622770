package e2e

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// runBinary runs a headcount binary to its end (within a minute) and
// returns its exit code, stdout and stderr.
func runBinary(t *testing.T, name string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), name), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s %v: %v", name, args, err)
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done //nolint:errcheck // killed: its error says only that
		t.Fatalf("%s %v still running after a minute; it should have exited. stderr:\n%s", name, args, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestVersion: every binary answers --version with its name, the module
// version and the commit it was built from, on stdout, and exits 0.
func TestVersion(t *testing.T) {
	revision := `unknown` // outside a git checkout
	if rev, err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Output(); err == nil {
		revision = strings.TrimSpace(string(rev)) + `, \S+(, modified)?`
	}
	for _, bin := range []string{"wsnode", "cleaner", "httpapi"} {
		code, stdout, stderr := runBinary(t, bin, "--version")
		require.Equal(t, 0, code, stderr)
		require.Regexp(t, `^`+bin+` \S+ \(revision `+revision+`; go\S+\)\n$`, stdout)
		require.Empty(t, stderr)
	}
}

// TestStrayWordsRefused: a word where none belongs ends the binary with
// exit code 2 before it serves anything; `wsnode version` used to start a
// node.
func TestStrayWordsRefused(t *testing.T) {
	addr, admin := freeAddr(t), freeAddr(t)
	code, _, stderr := runBinary(t, "wsnode", "version", "--addr", addr, "--admin-addr", admin, "--redis", "redis://127.0.0.1:1")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `unexpected argument "version": wsnode takes flags only (did you mean --version?)`)
	code, _, stderr = runBinary(t, "httpapi", "--addr", addr, "serve")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `unexpected argument "serve"`)
	code, _, stderr = runBinary(t, "cleaner", "audti")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, `unknown command "audti"`)
}

// TestEveryBadSettingAtOnce: one run reports every bad setting, whatever
// kind of problem each is, and suggests the URL a bare --redis host:port
// meant.
func TestEveryBadSettingAtOnce(t *testing.T) {
	code, stdout, stderr := runBinary(t, "wsnode", "--drain", "soon", "--no-such-flag", "--heartbeat=-1s", "--redis", "localhost:6379", "--log-format", "xml")
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	for _, want := range []string{
		"wsnode: invalid configuration:",
		`--drain: "soon" is not a duration`,
		"--no-such-flag: no such flag",
		"--heartbeat: -1s must be positive",
		"did you mean redis://localhost:6379?",
		`--log-format: "xml" is not text or json`,
	} {
		require.Contains(t, stderr, want)
	}
	require.NotContains(t, stderr, "Usage", "the problems, not the whole usage")

	code, _, stderr = runBinary(t, "cleaner", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "Commands:\n  audit [--repair]")
}

// TestCleanerAuditFlagsAfterTheCommand: `cleaner audit --redis URL`, the
// form people type, audits that Redis.
func TestCleanerAuditFlagsAfterTheCommand(t *testing.T) {
	srv := redistest.New(t)
	code, stdout, stderr := runBinary(t, "cleaner", "audit", "--redis", srv.URL(), "--admin-addr", "")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, "consistent")
	code, stdout, stderr = runBinary(t, "cleaner", "audit", "--repair", "--redis", srv.URL(), "--admin-addr", "")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
}

// httpStatus is the status of GET url, 0 when it cannot be reached.
func httpStatus(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestUp: wsnode's and httpapi's public ports answer GET /up as their
// admin ports answer /readyz: 200 while ready.
func TestUp(t *testing.T) {
	srv := redistest.New(t)
	ws := startWSNode(t, "ws-up", "--redis", srv.URL())
	waitReady(t, ws.p, ws.admin)
	waitOK(t, ws.p, "http://"+ws.addr+"/up", 20*time.Second)
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", "--redis", srv.URL(), "--addr", api.addr, "--admin-addr", api.admin)
	waitReady(t, api.p, api.admin)
	waitOK(t, api.p, "http://"+api.addr+"/up", 20*time.Second)
	require.Equal(t, http.StatusNotFound, httpStatus("http://"+api.addr+"/upx"), "only /up")
}

// TestUnreachableRedisLogsNoSuccess: a wsnode whose Redis cannot be
// reached says so, answers 503 on /up, and on SIGTERM logs no success it
// did not have: no "counts reach Redis", no "subscriptions restored", no
// "removed this node's counts". Loggers are named <binary>.<component>.
func TestUnreachableRedisLogsNoSuccess(t *testing.T) {
	t.Parallel()
	dead := "redis://127.0.0.1:" + strings.Split(freeAddr(t), ":")[1]
	ws := startWSNode(t, "ws-no-redis", "--redis", dead)
	logText := func() string { b, _ := os.ReadFile(ws.p.log); return string(b) }
	require.Eventually(t, func() bool {
		return strings.Contains(logText(), "[WARN]  wsnode.counts: cannot write counts to Redis")
	}, 20*time.Second, 20*time.Millisecond, "the counts' failure is logged")
	require.Equal(t, http.StatusServiceUnavailable, httpStatus("http://"+ws.addr+"/up"))
	require.Equal(t, http.StatusServiceUnavailable, httpStatus("http://"+ws.admin+"/readyz"))

	ws.p.signal(syscall.SIGTERM)
	require.Equal(t, 1, ws.p.wait(t, 30*time.Second), "removing its counts failed: exit 1")
	out := logText()
	for _, lie := range []string{"counts reach Redis", "subscriptions restored", "removed this node's counts", "liveness subscription restored", "wsnode.wsnode"} {
		require.NotContains(t, out, lie)
	}
	require.Contains(t, out, "[WARN]  wsnode.fanout: redis pub/sub subscriptions lost")
	require.Contains(t, out, "[ERROR] wsnode: stopped with an error: error=\"wsnode: remove this node's counts (the cleaner will reap them)")
}
