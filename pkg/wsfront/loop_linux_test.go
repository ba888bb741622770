package wsfront_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/headcount/headcount/pkg/evloop"
	"github.com/headcount/headcount/pkg/wsclient"
	"github.com/headcount/headcount/pkg/wsfront"
)

// Past the cap, every client reads the 503, but only 16 refused
// connections linger at once: the others are closed once it is out. None
// of them counts in Open, and every place is given back when they end.
func TestLoopFrontCapLingering(t *testing.T) {
	f := serveLoop(t, wsfront.Options{MaxConns: 1}, echoUpgrade)
	a, err := wsclient.Dial(f.Addr(), path)
	require.NoError(t, err)
	defer a.Close()
	const refused = 24 // more than refusingAtOnce (16)
	for i := range refused {
		c, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		defer c.Close() // held open: a lingering connection waits for it
		require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
		_, err = io.WriteString(c, upgradeHead)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "client %d", i)
		defer resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}
	require.Equal(t, 1, f.Open())
	conns, lingering := f.LoopState()
	require.Equal(t, 16, lingering, "the other 8 are closed")
	require.Equal(t, 1, conns, "refused connections are not counted")
	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { conns, lingering = f.LoopState(); return conns+lingering == 0 }, wait, tick,
		"the lingering ones end with their linger (1 s), the upgraded one with its client")
}

// Shutdown closes the connections still sending their head, leaves the
// upgraded ones open (Close ends them), and Serve returns nil; after Close
// no goroutine is left.
func TestLoopFrontShutdownAndClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f, err := wsfront.ListenLoop("127.0.0.1:0", wsfront.Options{}, echoUpgrade)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- f.Serve() }()

	up, err := wsclient.Dial(f.Addr(), path)
	require.NoError(t, err)
	defer up.Close()
	got, err := up.Read(wait)
	require.NoError(t, err)
	require.Equal(t, hello, got)
	partial, err := net.Dial("tcp", f.Addr())
	require.NoError(t, err)
	defer partial.Close()
	_, err = io.WriteString(partial, "GET "+path+" HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.Open() == 2 }, wait, tick, "Open counts heads and upgraded sockets")

	f.Shutdown(wait)
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Serve did not return after Shutdown")
	}
	require.NoError(t, partial.SetReadDeadline(time.Now().Add(wait)))
	_, err = partial.Read(make([]byte, 1))
	// An end of stream, or a reset when its head was still unread in the
	// kernel as it was closed.
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "a connection still sending its head is closed: %v", err)
	require.Equal(t, 1, f.Open())
	_, err = net.DialTimeout("tcp", f.Addr(), wait)
	require.Error(t, err, "no longer accepting")

	require.NoError(t, up.Send("still here"))
	got, err = up.Read(wait)
	require.NoError(t, err)
	require.Equal(t, "still here", got, "an upgraded socket outlives Shutdown")

	require.NoError(t, f.Close())
	_, err = up.Read(wait)
	require.Error(t, err, "Close ends the upgraded sockets")
	require.Zero(t, f.Open())
}

// What a client sends behind its head, in the same packet, reaches the
// new owner (early) before anything read later, even a frame split
// between the two.
func TestLoopFrontEarlyBytesInOrder(t *testing.T) {
	var early atomic.Int64
	f := serveLoop(t, wsfront.Options{}, func(c *evloop.Conn, w http.ResponseWriter, r *http.Request, b []byte) bool {
		early.Store(int64(len(b)))
		return echoUpgrade(c, w, r, b)
	})
	c, err := net.Dial("tcp", f.Addr())
	require.NoError(t, err)
	defer c.Close()
	two := wsclient.TextFrame("two")
	first := append([]byte(upgradeHead), wsclient.TextFrame("one")...)
	first = append(first, two[:4]...)
	_, err = c.Write(first)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.Equal(t, int64(len(first)-len(upgradeHead)), early.Load(), "the bytes behind the head came as early")
	_, err = c.Write(append(two[4:], wsclient.TextFrame("three")...))
	require.NoError(t, err)
	r := &rawConn{wsclient.NewConn(c, br)}
	for _, want := range []string{hello, "one", "two", "three"} {
		require.Equal(t, want, r.read(t))
	}
}

// A client that goes away while its upgrade is handled (reading paused)
// is still closed and uncounted, and an upgrade that then refuses it does
// not take the node down (its address is gone: it used to panic logging
// it). An OnClose delivered before the handler took the connection went
// to the front: the new owner learns of the end from Write's ErrClosed.
func TestLoopFrontClientGoneDuringUpgrade(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		t.Run(map[bool]string{true: "refused", false: "taken"}[refuse], func(t *testing.T) {
			var f *wsfront.LoopFront
			gone := make(chan struct{})
			result := make(chan error, 1)
			f = serveLoop(t, wsfront.Options{}, func(c *evloop.Conn, w http.ResponseWriter, _ *http.Request, _ []byte) bool {
				<-gone
				if refuse {
					http.Error(w, "origin not allowed", http.StatusForbidden)
					return false
				}
				c.SetHandler(&echo{})
				_, err := c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\n\r\n"))
				result <- err
				c.ResumeRead()
				return true
			})
			c, err := net.Dial("tcp", f.Addr())
			require.NoError(t, err)
			_, err = io.WriteString(c, upgradeHead)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return f.Open() == 1 }, wait, tick)
			require.NoError(t, c.(*net.TCPConn).SetLinger(0))
			require.NoError(t, c.Close()) // a reset: reported even while reading is paused
			require.Eventually(t, func() bool { return f.Open() == 0 }, wait, tick)
			close(gone)
			if !refuse {
				require.ErrorIs(t, <-result, evloop.ErrClosed)
			}
		})
	}
}
