package lifecycle

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLivenessOutlastsTheAdminTimeouts: GET /liveness answers 200 at once
// and stays open past the admin server's read and write timeouts (its
// deadlines cleared), and ends when the node releases its liveness
// subscription (done).
func TestLivenessOutlastsTheAdminTimeouts(t *testing.T) {
	done := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("/liveness", LivenessHandler(done))
	const short = 50 * time.Millisecond
	srv, err := Listen("127.0.0.1:0", mux, Timeouts{Header: short, Read: short, Write: short, Idle: short})
	require.NoError(t, err)
	go func() { _ = srv.Serve() }()
	t.Cleanup(srv.Close)

	c, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	ended := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); ended <- err }()
	select {
	case err := <-ended:
		t.Fatalf("the watch ended within ten times the admin timeouts: %v", err)
	case <-time.After(10 * short): // a wait for something that must not happen
	}
	close(done)
	select {
	case err := <-ended:
		require.NoError(t, err, "a graceful end is a complete response, not a cut connection")
	case <-time.After(10 * time.Second):
		t.Fatal("the watch outlived the liveness subscription")
	}
}

// TestLivenessWatchesAreCapped: past MaxLivenessWatches held at once, a
// watch is answered 503 at once, so whoever reaches the admin port cannot
// take the process's descriptors one held response at a time; a watch
// that ends makes room.
func TestLivenessWatchesAreCapped(t *testing.T) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	mux := http.NewServeMux()
	mux.Handle("/liveness", LivenessHandler(done))
	srv, err := Listen("127.0.0.1:0", mux, AdminTimeouts)
	require.NoError(t, err)
	go func() { _ = srv.Serve() }()
	t.Cleanup(srv.Close)
	watch := func() (net.Conn, int) {
		c, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		_, err = c.Write([]byte("GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil) //nolint:bodyclose // a held response never ends: closing c ends it
		require.NoError(t, err)
		return c, resp.StatusCode
	}
	conns := make([]net.Conn, MaxLivenessWatches)
	for i := range conns {
		var code int
		conns[i], code = watch()
		require.Equal(t, http.StatusOK, code, "watch %d", i)
		defer conns[i].Close()
	}
	c, code := watch()
	_ = c.Close()
	require.Equal(t, http.StatusServiceUnavailable, code)
	_ = conns[0].Close()
	require.Eventually(t, func() bool {
		c, code := watch()
		if code == http.StatusOK {
			conns[0] = c
			return true
		}
		_ = c.Close()
		return false
	}, 10*time.Second, 10*time.Millisecond, "a watch that ended makes room")
}
