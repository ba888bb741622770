package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/redisx/redistest"
)

// TestMain runs main instead of the tests when re-executed by a test, so
// exit codes and signals are tested on the real entry point.
func TestMain(m *testing.M) {
	if os.Getenv("WSNODE_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
	}
	os.Exit(m.Run())
}

func noEnv(string) string { return "" }

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
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			env := func(k string) string { return tc.env[k] }
			require.Equal(t, 2, run(tc.args, env, &stderr))
			require.Contains(t, stderr.String(), "wsnode: invalid configuration")
			require.Contains(t, stderr.String(), tc.want)
		})
	}
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
	store := counts.NewStore(srv.Client(t))
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
