package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/wsclient"
)

// TestMain runs main instead of the tests when re-executed by a test, so
// exit codes and signals are tested on the real entry point.
// WSNODE_TEST_NOFILE lowers the child's open-file limit (soft and hard)
// first, as `prlimit --nofile` would.
func TestMain(m *testing.M) {
	if os.Getenv("WSNODE_TEST_MAIN") == "1" {
		if v := os.Getenv("WSNODE_TEST_NOFILE"); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err == nil {
				err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "WSNODE_TEST_NOFILE:", err)
				os.Exit(3)
			}
		}
		os.Exit(run(os.Args[1:], os.LookupEnv, os.Stderr))
	}
	os.Exit(m.Run())
}

func noEnv(string) (string, bool) { return "", false }

func TestBadConfigurationExits2NamingTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad duration flag", []string{"--heartbeat", "soon"}, nil, "heartbeat"},
		{"negative drain", []string{"--drain=-1s"}, nil, "--drain"},
		{"bad address", []string{"--addr", "nowhere"}, nil, "--addr"},
		{"unknown flag", []string{"--no-such-flag"}, nil, "no-such-flag"},
		{"bad env", nil, map[string]string{"HEADCOUNT_DRAIN": "forever"}, "HEADCOUNT_DRAIN"},
		{"stray word", []string{"version"}, nil, `unexpected argument "version": wsnode takes flags only (did you mean --version?)`},
		{"stray word after flags", []string{"--drain", "1s", "start"}, nil, `unexpected argument "start"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			require.Equal(t, 2, run(tc.args, env, &stderr))
			require.Contains(t, stderr.String(), "wsnode: invalid configuration")
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

func TestVersionExits0(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runTo([]string{"--version", "--drain", "never"}, noEnv, &stdout, &stderr), stderr.String())
	require.Regexp(t, `^wsnode \S+ \(revision .+; go1\.\S+\)\n$`, stdout.String())
	require.Empty(t, stderr.String())
}

func TestHelpExits0(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"--help"}, noEnv, &stderr))
	require.Contains(t, stderr.String(), "-drain")
}

func TestListenFailureExits1(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	var stderr bytes.Buffer
	require.Equal(t, 1, run([]string{"--addr", taken.Addr().String(), "--admin-addr", ""}, noEnv, &stderr))
	require.Contains(t, stderr.String(), "--addr")
}

// TestSIGTERMDrainsAndExits0 runs the binary's main in a child process:
// SIGTERM closes its sockets with 4200, removes its counts, and exits 0.
func TestSIGTERMDrainsAndExits0(t *testing.T) {
	srv := redistest.New(t)
	cmd := exec.Command(os.Args[0], "--redis", srv.URL(), "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--heartbeat", "100ms", "--drain", "200ms", "--log-format", "json", "--node-id", "sigterm-node")
	cmd.Env = append(os.Environ(), "WSNODE_TEST_MAIN=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The "serving" log line says where it listens; the rest of the log is
	// kept for failure messages.
	addrc := make(chan string, 1)
	var logs bytes.Buffer
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(io.TeeReader(stderr, &logs))
		for sc.Scan() {
			var line struct {
				Message string `json:"@message"`
				Addr    string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "serving" {
				addrc <- line.Addr
			}
		}
	}()
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(10 * time.Second):
		t.Fatalf("wsnode did not start:\n%s", logs.String())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/app-key?protocol=7", nil)
	require.NoError(t, err)
	defer c.CloseNow()
	_, _, err = c.Read(ctx) // connection_established
	require.NoError(t, err)
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"room"}}`)))
	_, _, err = c.Read(ctx) // subscription_succeeded
	require.NoError(t, err)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	require.Eventually(t, func() bool { n, _ := store.Channel(ctx, "app-id", "room"); return n == 1 }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_, _, err = c.Read(ctx)
	require.Equal(t, websocket.StatusCode(4200), websocket.CloseStatus(err), "close: %v", err)
	<-logDone
	require.NoError(t, cmd.Wait(), "exit status; log:\n%s", logs.String())
	n, err := store.Channel(ctx, "app-id", "room")
	require.NoError(t, err)
	require.Zero(t, n, "the node removes its own counts on SIGTERM")
	require.True(t, strings.Contains(logs.String(), "removed this node's counts"), logs.String())
}

// lowLimitNode is the binary's main run in a child process whose open-file
// limit is 150, with a JSON log.
type lowLimitNode struct {
	cmd         *exec.Cmd
	addr, admin string
	maxSockets  int
	log         *proctest.Buffer
	store       *counts.Store
	done        chan struct{}
}

func startLowLimitNode(t *testing.T, args ...string) *lowLimitNode {
	t.Helper()
	srv := redistest.New(t)
	n := &lowLimitNode{log: &proctest.Buffer{}, store: counts.NewStore(srv.Client(t), keyspace.Space{}), done: make(chan struct{})}
	n.cmd = exec.Command(os.Args[0], append([]string{"--redis", srv.URL(), "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--heartbeat", "100ms", "--drain", "200ms", "--log-format", "json", "--node-id", "low-limit-node"}, args...)...)
	n.cmd.Env = append(os.Environ(), "WSNODE_TEST_MAIN=1", "WSNODE_TEST_NOFILE=150")
	n.cmd.Stderr = n.log
	require.NoError(t, n.cmd.Start())
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
		if t.Failed() {
			t.Logf("wsnode log:\n%s", n.log.String())
		}
	})
	require.Eventually(t, func() bool { return len(n.lines("serving")) > 0 }, 10*time.Second, 10*time.Millisecond, "wsnode did not start")
	l := n.lines("serving")[0]
	n.addr, n.admin = fmt.Sprint(l["addr"]), fmt.Sprint(l["admin_addr"])
	maxSockets, ok := l["max_sockets"].(float64)
	require.True(t, ok, "the serving line has max_sockets: %v", l)
	n.maxSockets = int(maxSockets)
	return n
}

// lines returns the log lines whose message contains msg.
func (n *lowLimitNode) lines(msg string) []map[string]any {
	return proctest.LogLines(n.log.String(), msg)
}

func (n *lowLimitNode) get(path string) (int, string) {
	return proctest.Get("http://"+n.admin+path, 2*time.Second)
}

// cpu is the child's user and system CPU time so far.
func (n *lowLimitNode) cpu(t *testing.T) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.cmd.Process.Pid))
	require.NoError(t, err)
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

const upgradeHead = "GET /app/app-key?protocol=7 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"

// Under an open-file limit of 150 the node caps its sockets at 150 - 64:
// one client holding that many idle sockets gets 503 for the next ones,
// while /readyz and /metrics keep answering, a socket under the cap still
// subscribes and is counted in Redis, and the refusals make one log line.
func TestSocketCapUnderLowFileLimit(t *testing.T) {
	n := startLowLimitNode(t)
	require.Equal(t, 86, n.maxSockets, "derived from the limit: 150 - max(64, 15)")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	probe, _, err := websocket.Dial(ctx, "ws://"+n.addr+"/app/app-key?protocol=7", nil)
	require.NoError(t, err)
	defer probe.CloseNow()
	_, _, err = probe.Read(ctx) // connection_established
	require.NoError(t, err)
	var idle []*wsclient.Conn
	defer func() {
		for _, c := range idle {
			_ = c.Close()
		}
	}()
	for range n.maxSockets - 1 {
		c, err := wsclient.Dial(n.addr, "/app/app-key?protocol=7")
		require.NoError(t, err, "socket %d of %d", len(idle)+2, n.maxSockets)
		idle = append(idle, c)
	}

	for i := range 20 {
		c, err := net.Dial("tcp", n.addr)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(c, upgradeHead)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "connection %d past the cap", i+1)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
		require.Contains(t, string(body), "--max-sockets")
		_ = c.Close()
	}

	status, _ := n.get("/readyz")
	require.Equal(t, http.StatusOK, status, "/readyz at the cap")
	status, metrics := n.get("/metrics")
	require.Equal(t, http.StatusOK, status, "/metrics at the cap")
	require.Contains(t, metrics, `headcount_wsnode_errors_total{reason="socket_cap"} 20`)
	require.Contains(t, metrics, "headcount_wsnode_port_connections 86")
	require.Contains(t, metrics, "headcount_wsnode_max_sockets 86")

	// Redis still works for the sockets the node holds.
	require.NoError(t, probe.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"room"}}`)))
	_, msg, err := probe.Read(ctx)
	require.NoError(t, err)
	require.Contains(t, string(msg), "pusher_internal:subscription_succeeded")
	require.Eventually(t, func() bool { c, _ := n.store.Channel(ctx, "app-id", "room"); return c == 1 }, 10*time.Second, 10*time.Millisecond)

	// A place freed is a place taken.
	require.NoError(t, idle[0].Close())
	require.Eventually(t, func() bool {
		c, err := wsclient.Dial(n.addr, "/app/app-key?protocol=7")
		if err != nil {
			return false
		}
		idle[0] = c
		return true
	}, 10*time.Second, 50*time.Millisecond)

	require.Len(t, n.lines("socket cap"), 1, "one warning for 20 refusals")
	require.NotContains(t, n.log.String(), "too many open files")
}

// With the cap set above what the open-file limit allows, the node runs out
// of descriptors: its accept loop then backs off instead of spinning and
// logs once, and once the client lets go both ports answer again.
func TestAcceptBacksOffWhenOutOfFiles(t *testing.T) {
	n := startLowLimitNode(t, "--max-sockets", "1000")
	require.Equal(t, 1000, n.maxSockets)
	require.NotEmpty(t, n.lines("less room"), "the node warns about a cap above the default")

	var conns []net.Conn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
	}
	defer closeAll()
	for range 200 { // the kernel completes these whether or not the node accepts them
		c, err := net.Dial("tcp", n.addr)
		require.NoError(t, err)
		_, _ = io.WriteString(c, upgradeHead)
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return len(n.lines("accepting a connection failed")) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, n.lines("accepting a connection failed")[0]["error"], "too many open files")

	// Out of files, the node idles: the accept loop waits up to a second
	// between tries rather than retrying at once.
	time.Sleep(time.Second) // let the backoff reach its ceiling
	before := n.cpu(t)
	time.Sleep(2 * time.Second) // a measuring window, not a wait for a condition
	used := n.cpu(t) - before
	t.Logf("CPU in 2 s out of files: %v", used)
	require.Less(t, used, 500*time.Millisecond, "CPU in 2 s out of files")
	require.LessOrEqual(t, len(n.lines("accepting a connection failed")), 1, "one warning per 10 s, not one per try")

	closeAll()
	require.Eventually(t, func() bool { s, _ := n.get("/readyz"); return s == http.StatusOK }, 20*time.Second, 50*time.Millisecond)
	c, err := wsclient.Dial(n.addr, "/app/app-key?protocol=7")
	require.NoError(t, err)
	_ = c.Close()
}

// TestAppsFileFields: a field of the apps file that is neither headcount's
// nor soketi's exits 2 naming it and its app; a soketi setting headcount
// does not implement is logged as a warning naming it, before anything
// else can fail.
func TestAppsFileFields(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.json")
	require.NoError(t, os.WriteFile(typo, []byte(`[{"id":"a","key":"k","secret":"s","maxConections":5}]`), 0o600))
	var stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"--apps-file", typo}, noEnv, &stderr))
	require.Contains(t, stderr.String(), `app 0 (id "a"): unknown field(s) "maxConections"`)

	// A value that would load and never work is refused the same way.
	misspelt := filepath.Join(dir, "misspelt.json")
	require.NoError(t, os.WriteFile(misspelt, []byte(`[{"id":"a","key":"k/1","secret":" ","capacities":[{"prefix":"room-","capacity":2}],
	  "webhooks":[{"url":"http://127.0.0.1:9/h","event_types":["channel_ocupied"]}]}]`), 0o600))
	stderr.Reset()
	require.Equal(t, 2, run([]string{"--apps-file", misspelt}, noEnv, &stderr))
	for _, want := range []string{`app "a": key "k/1" must be`, `app "a": secret is empty or blank`,
		`app "a": capacities[0] (prefix "room-"): not a presence channel's prefix`, `app "a": webhooks[0]: event_types[0] "channel_ocupied" is not an event type`} {
		require.Contains(t, stderr.String(), want)
	}

	soketi := filepath.Join(dir, "soketi.json")
	require.NoError(t, os.WriteFile(soketi, []byte(`[{"id":"a","key":"k","secret":"s","maxEventNameLength":50}]`), 0o600))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	stderr.Reset()
	require.Equal(t, 1, run([]string{"--apps-file", soketi, "--addr", taken.Addr().String(), "--admin-addr", ""}, noEnv, &stderr))
	require.Regexp(t, `\[WARN\] +wsnode[.a-z]*: apps file: app "a": field maxEventNameLength is a soketi setting headcount does not implement; it is ignored`, stderr.String())
}

// TestAppCredentialsExit2 runs the binary's main with the default app's
// credential variables partly set, or set to "": it exits 2 naming the
// variable, instead of serving the published app-secret. With none set it
// gets past the configuration (here to a taken port: exit 1).
func TestAppCredentialsExit2(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	proctest.RequireCredentialExits(t, []string{"--addr", taken.Addr().String(), "--admin-addr", ""},
		map[string]string{"WSNODE_TEST_MAIN": "1"}, "--addr")
}
