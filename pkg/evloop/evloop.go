package evloop

import (
	"errors"
	"time"
)

// Handler receives a connection's events. Every method runs on the
// connection's loop, one at a time per loop, and must not block: a call that
// waits stalls every socket of that loop.
type Handler interface {
	// OnData is given the bytes just read. b is the loop's shared read
	// buffer: valid, and writable, only during the call; keep a copy of
	// what must outlive it.
	OnData(c *Conn, b []byte)
	// OnDrained reports that output a Write had left pending is now all
	// written.
	OnDrained(c *Conn)
	// OnClose is called once, after the descriptor is closed; err says why
	// (io.EOF for the peer's end of stream, nil for Close or
	// CloseAfterFlush, ErrServerClosed for Server.Close, else the socket's
	// error).
	OnClose(c *Conn, err error)
}

// Options configure a Server. The zero value is usable.
type Options struct {
	// Loops is the number of event loops, each one goroutine on its own OS
	// thread; 0 means runtime.GOMAXPROCS(0).
	Loops int
	// ReadBufferSize is the size of each loop's read buffer; 0 means
	// DefaultReadBufferSize. A socket is read at most this much per event.
	ReadBufferSize int
	// OnAccept is called on the accept goroutine for each new connection,
	// before any of its events: set its handler here (c.SetHandler).
	// Returning false refuses it: the descriptor is closed and OnClose is
	// not called. nil accepts every connection with a handler that drops
	// its input.
	OnAccept func(c *Conn) bool
	// OnAcceptError is called for each failed accept (EMFILE, ENFILE,
	// ENOBUFS...) with the delay before the next try: portcap.NextBackoff,
	// from 5 ms doubling up to 1 s while accepts keep failing.
	OnAcceptError func(err error, retryIn time.Duration)
}

// DefaultReadBufferSize is a loop's read buffer when Options leave it 0.
const DefaultReadBufferSize = 64 << 10

// Stats are a Server's counters, read without stopping the loops; each
// field is read atomically, the set is not a snapshot.
type Stats struct {
	Loops        int    // event loops
	Conns        int64  // connections open now
	Accepted     uint64 // connections accepted (OnAccept called)
	AcceptErrors uint64 // failed accepts (each one backed off)
	Events       uint64 // epoll events handled, wake-ups included
	StaleEvents  uint64 // events dropped: their connection was closed, or its descriptor reused
	EAGAINWrites uint64 // writes that left output pending (the socket's send buffer was full)
	PendingBytes int64  // bytes waiting in every connection's pending output
}

var (
	// ErrClosed is returned by Write on a closed connection, or one
	// closing after its output is flushed.
	ErrClosed = errors.New("evloop: connection closed")
	// ErrServerClosed is Serve's answer after Close, and the reason given
	// to OnClose for connections closed by Server.Close.
	ErrServerClosed = errors.New("evloop: server closed")
	// ErrUnsupported is Listen's answer off Linux.
	ErrUnsupported = errors.New("evloop: the event loop runs on Linux only")
)

// nopHandler drops input; a connection accepted without a handler has it.
type nopHandler struct{}

func (nopHandler) OnData(*Conn, []byte) {}
func (nopHandler) OnDrained(*Conn)      {}
func (nopHandler) OnClose(*Conn, error) {}
