package wsnode_test

import (
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/wsclient"
)

// rawRequest sends head on a fresh connection to n and returns the
// response; the front closes the connection after anything but a 101.
func rawRequest(t *testing.T, n *testNode, head string) (*http.Response, string) {
	t.Helper()
	resp, body, err := wsclient.Request(n.Addr(), head, wait)
	require.NoError(t, err, "the body ends where Content-Length says")
	return resp, body
}

const upgradeHeaders = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// The node counts what its WebSocket port refuses, the front's refusals
// (package wsfront, whose tests cover each) and its own handler's alike,
// under errors_total{reason="handshake_refused"}, and a refusal touches no
// count.
func TestFrontRefusals(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	path := "/app/" + appKey + pusherJSQuery
	for _, tc := range []struct {
		name, head string
		status     int
		body       string
	}{
		{"not an upgrade", "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusUpgradeRequired, "Upgrade"},
		{"other path", "GET /metrics HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "/app/{key}"},
		{"POST", "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "Content-Length: 0\r\n\r\n", http.StatusMethodNotAllowed, "GET"},
		{"body", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "Content-Length: 5\r\n\r\nhello", http.StatusBadRequest, "no body"},
		{"old WebSocket version", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + strings.Replace(upgradeHeaders, "13", "8", 1) + "\r\n", http.StatusBadRequest, "13"},
		{"head too large", "GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "16384"},
		{"HTTP/2.0", "GET " + path + " HTTP/2.0\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusHTTPVersionNotSupported, "HTTP/1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawRequest(t, n, tc.head)
			require.Equal(t, tc.status, resp.StatusCode, body)
			require.Contains(t, body, tc.body)
			require.True(t, resp.Close, "Connection: close")
		})
	}
	require.Equal(t, 7.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "handshake_refused"))
	n.requireCounts(t, map[string]int64{})
}

// Stopping a node closes a connection still to send its request head,
// long before its head timeout (the default 10 s) would; the front's sweep
// of slow heads is wsfront's to test.
func TestFrontStopClosesHeads(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	n := startNode(t).run(t)
	silent, err := net.Dial("tcp", n.Addr())
	require.NoError(t, err)
	defer silent.Close()
	// A socket served after it proves the silent connection was accepted
	// before the stop. It is closed first so the drain need not wait for it.
	c := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	_ = c.read(t)
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return metricstest.Value(t, n.reg, "headcount_wsnode_connections_open") == 0 }, wait, tick)
	stopped := time.Now()
	n.Stop()
	n.waitRun(t)
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(wait)))
	_, err = silent.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Less(t, time.Since(stopped), 5*time.Second, "closed by the stop, not the head timeout")
}

// The port holds at most --max-sockets connections, handshaking or
// upgraded: one past it is answered 503 (read intact by the client) and
// closed, and a closed connection gives its place back.
func TestFrontSocketCap(t *testing.T) {
	t.Parallel()
	n := startNode(t, func(c *config.WSNode) { c.MaxSockets = 3 }).run(t)
	require.Equal(t, 3.0, metricstest.Value(t, n.reg, "headcount_wsnode_max_sockets"))
	open := func() float64 { return metricstest.Value(t, n.reg, "headcount_wsnode_port_connections") }

	a := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, a.read(t), "pusher:connection_established")
	b := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, b.read(t), "pusher:connection_established")
	silent, err := net.Dial("tcp", n.Addr()) // still to send its head: counted all the same
	require.NoError(t, err)
	defer silent.Close()
	require.Eventually(t, func() bool { return open() == 3 }, wait, tick)

	head := "GET /app/" + appKey + pusherJSQuery + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n"
	for range 2 {
		resp, body := rawRequest(t, n, head)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Contains(t, body, "--max-sockets")
		require.True(t, resp.Close)
	}
	require.Equal(t, 2.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "socket_cap"))
	require.Equal(t, 3.0, open(), "refused connections are not counted")

	require.NoError(t, silent.Close())
	require.Eventually(t, func() bool { return open() == 2 }, wait, tick)
	c := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")

	for _, s := range []*rawConn{a, b, c} {
		require.NoError(t, s.Close())
	}
	require.Eventually(t, func() bool { return open() == 0 }, wait, tick, "every way a socket ends gives its place back")
}

// TestExitAnchoredMetric: headcount_wsnode_exit_anchored says whether an
// exit anchor holds the node's memory: 1 with --exit-anchor on Linux on
// amd64 (the anchor is the process's: this test binary's, from here on),
// 0 with it off, whatever the process holds.
func TestExitAnchoredMetric(t *testing.T) {
	t.Parallel()
	on := startNode(t, func(c *config.WSNode) { c.ExitAnchor = true }).run(t)
	want := 0.0
	if runtime.GOOS == "linux" && runtime.GOARCH == "amd64" {
		want = 1
	}
	require.Equal(t, want, metricstest.Value(t, on.reg, "headcount_wsnode_exit_anchored"))
	off := startNode(t, func(c *config.WSNode) { c.ExitAnchor = false }).run(t)
	require.Zero(t, metricstest.Value(t, off.reg, "headcount_wsnode_exit_anchored"))
}
