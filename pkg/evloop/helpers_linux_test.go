package evloop

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	wait = 10 * time.Second
	tick = 5 * time.Millisecond
)

// startServer serves opts on a free loopback port until the test ends.
func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", opts)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-served, ErrServerClosed)
	})
	return s
}

func dial(t *testing.T, s *Server) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr().String(), wait)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// echo writes back what it reads, copied: the read buffer is the loop's.
type echo struct{}

func (echo) OnData(c *Conn, b []byte) { _, _ = c.Write(append([]byte(nil), b...)) }
func (echo) OnDrained(*Conn)          {}
func (echo) OnClose(*Conn, error)     {}

// recorder records a connection's callbacks for a test to wait on.
type recorder struct {
	mu      sync.Mutex
	data    []byte
	drained int
	closes  []error
	closed  chan struct{}
	onData  func(c *Conn, b []byte)
}

func newRecorder() *recorder { return &recorder{closed: make(chan struct{})} }

func (r *recorder) OnData(c *Conn, b []byte) {
	r.mu.Lock()
	r.data = append(r.data, b...)
	f := r.onData
	r.mu.Unlock()
	if f != nil {
		f(c, b)
	}
}

func (r *recorder) OnDrained(*Conn) {
	r.mu.Lock()
	r.drained++
	r.mu.Unlock()
}

func (r *recorder) OnClose(_ *Conn, err error) {
	r.mu.Lock()
	r.closes = append(r.closes, err)
	if len(r.closes) == 1 {
		close(r.closed)
	}
	r.mu.Unlock()
}

func (r *recorder) snapshot() (data []byte, drained int, closes []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.data...), r.drained, append([]error(nil), r.closes...)
}

// accepting returns an OnAccept that gives each connection a new recorder
// and sends both on the channel.
type accepted struct {
	c *Conn
	r *recorder
}

func accepting() (func(*Conn) bool, chan accepted) {
	ch := make(chan accepted, 100)
	return func(c *Conn) bool {
		r := newRecorder()
		c.SetHandler(r)
		ch <- accepted{c, r}
		return true
	}, ch
}

func next(t *testing.T, ch chan accepted) accepted {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(wait):
		t.Fatal("no connection accepted")
		return accepted{}
	}
}

func waitClosed(t *testing.T, r *recorder) error {
	t.Helper()
	select {
	case <-r.closed:
	case <-time.After(wait):
		t.Fatal("OnClose not called")
	}
	_, _, closes := r.snapshot()
	return closes[0]
}

// readFull reads n bytes from c within the test's bound.
func readFull(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	require.NoError(t, err)
	return b
}

func dialB(b *testing.B, s *Server) net.Conn {
	b.Helper()
	c, err := net.DialTimeout("tcp", s.Addr().String(), wait)
	require.NoError(b, err)
	return c
}
