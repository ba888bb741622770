package lifecycle

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/pkg/logging"
)

// Cap caps the connections a Server holds open on its port, so that its
// clients cannot take the file descriptors the process needs for its other
// work: its Redis connections, its admin port. See ListenCapped.
type Cap struct {
	// Max is the most connections open at once; 0 means no cap.
	Max int
	// Setting names the setting Max comes from ("--max-connections"), in
	// the warnings and in the answer to a refused connection.
	Setting string
	// Logger gets the warnings, each at most once per 10 s; nil: none.
	Logger hclog.Logger
	// OnEvent, if set, is called for every connection refused or closed to
	// make room, and every failed accept; from the accept loop, so it must
	// not block.
	OnEvent func(CapEvent)
}

// CapEvent is what a capped Server reports to Cap.OnEvent.
type CapEvent uint8

const (
	// CapRefused is a connection past the cap, with no waiting connection
	// to close in its place: answered 503 and closed before anything of it
	// was read.
	CapRefused CapEvent = iota + 1
	// CapClosedIdle is a keep-alive connection waiting for its next request,
	// the longest waiting, closed to admit a new one.
	CapClosedIdle
	// CapClosedNew is a connection that had not sent a whole request head
	// for reclaimNewAfter, the longest waiting, closed to admit a new one.
	CapClosedNew
	// CapAcceptFailed is a failed accept (out of file descriptors, say),
	// retried after a backoff.
	CapAcceptFailed
)

func (e CapEvent) String() string {
	switch e {
	case CapRefused:
		return "refused"
	case CapClosedIdle:
		return "closed_idle"
	case CapClosedNew:
		return "closed_new"
	case CapAcceptFailed:
		return "accept_failed"
	}
	return "unknown"
}

const (
	// reclaimNewAfter is how long a new connection may go without sending a
	// whole request head before it may be closed to make room: long enough
	// for any client that sends its request as it connects, so that a burst
	// of new connections past the cap is refused rather than made to close
	// each other before their requests arrive.
	reclaimNewAfter = time.Second
	// refusingAtOnce bounds the refused connections draining at once, each
	// for up to lingerTimeout (see refuse).
	refusingAtOnce = 16
	// lingerTimeout bounds how long a refused connection is drained.
	lingerTimeout = time.Second
)

// ListenCapped is Listen with a cap on the connections open on the port
// (c.Max; 0: none), counted from their accept to their first close, however
// it comes: the client's, a timeout's, Shutdown's, or the close of a
// hijacked connection by its new owner. A connection accepted at the cap
// takes the place of the connection that has waited longest for a request,
// as nginx reuses keep-alive connections under pressure: a keep-alive
// connection between requests, or one that has not sent a whole request
// head within a second of its accept. If every connection is busy (a
// request in progress, or a new connection still within its second), the
// new one is refused: answered 503 with Retry-After and closed, before
// anything of it is read. A failed accept is retried after 5 ms, doubling
// up to a second, instead of at once. Each kind of event is logged at most
// once per 10 s, with its count.
func ListenCapped(addr string, h http.Handler, t Timeouts, c Cap) (*Server, error) {
	s, err := Listen(addr, h, t)
	if err != nil {
		return nil, err
	}
	l := newCapListener(s.ln, c)
	s.ln, s.capped = l, l
	s.srv.ConnState = l.connState
	return s, nil
}

// capListener is the listener of a capped Server: its Accept admits,
// exchanges or refuses each connection, and the server's ConnState hook
// tells it which connections are waiting for a request.
type capListener struct {
	net.Listener
	c   Cap
	max int64
	log hclog.Logger
	// reclaimNewAfter is reclaimNewAfter (tests change it before Serve).
	reclaimNewAfter time.Duration

	// open counts the connections admitted and not yet closed.
	open atomic.Int64

	mu sync.Mutex
	// idle and fresh are the connections waiting for a request, oldest
	// first: keep-alive ones between requests, and new ones that have not
	// sent their first request head yet.
	idle, fresh connList
	// lingering are the refused connections still draining.
	lingering map[net.Conn]struct{}
	closed    bool

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	drained   sync.WaitGroup // the lingering connections' goroutines

	// The accept loop's warnings; only Accept uses them.
	refusedLog, closedLog, acceptLog logging.Limiter
}

func newCapListener(ln net.Listener, c Cap) *capListener {
	l := &capListener{Listener: ln, c: c, max: int64(max(c.Max, 0)), log: c.Logger, reclaimNewAfter: reclaimNewAfter,
		lingering: map[net.Conn]struct{}{}, done: make(chan struct{})}
	if l.log == nil {
		l.log = hclog.NewNullLogger()
	}
	if l.c.OnEvent == nil {
		l.c.OnEvent = func(CapEvent) {}
	}
	return l
}

// Accept returns the next connection admitted under the cap. It refuses
// the connections it cannot admit itself, and retries failed accepts
// after a backoff, so that it returns an error only once the listener is
// closed.
func (l *capListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if l.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			l.c.OnEvent(CapAcceptFailed)
			if n, ok := l.acceptLog.Allow(time.Now()); ok {
				l.log.Warn("accepting a connection failed; retrying", "error", err, "retry_in", delay, "failures", n)
			}
			select {
			case <-time.After(delay):
			case <-l.done:
				return nil, net.ErrClosed
			}
			continue
		}
		delay = 0
		if cc := l.admit(c); cc != nil {
			return cc, nil
		}
	}
}

// admit counts c in, closing the connection that has waited longest for a
// request when the port is at its cap, or refuses c (nil) when none may
// be closed.
func (l *capListener) admit(c net.Conn) net.Conn {
	now := time.Now()
	l.mu.Lock()
	var victim *capConn
	var event CapEvent
	if l.max > 0 && l.open.Load() >= l.max {
		if victim, event = l.victim(now); victim == nil {
			l.mu.Unlock()
			l.refuse(c)
			return nil
		}
	}
	cc := &capConn{Conn: c, l: l, since: now, new: true}
	l.open.Add(1)
	l.fresh.push(cc)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Close() // its place is the new one's
		l.c.OnEvent(event)
		if n, ok := l.closedLog.Allow(now); ok {
			l.log.Warn("closing the connections that waited longest for a request to admit new ones: the port is at its connection cap ("+l.c.Setting+")",
				"max_connections", l.max, "closed", n)
		}
	}
	return cc
}

// victim takes out of its list the connection to close for a new one:
// of the keep-alive connection idle longest and the new connection
// without a request head longest (if for at least reclaimNewAfter), the
// one that has waited longer, with the event its close is; nil if
// neither. Called with l.mu held.
func (l *capListener) victim(now time.Time) (*capConn, CapEvent) {
	v, n := l.idle.head, l.fresh.head
	if n != nil && now.Sub(n.since) >= l.reclaimNewAfter && (v == nil || n.since.Before(v.since)) {
		v = n
	}
	if v == nil {
		return nil, 0
	}
	v.unlist()
	v.taken = true
	if v.new {
		return v, CapClosedNew
	}
	return v, CapClosedIdle
}

// refuse answers c, a connection past the cap, with 503 and closes it.
// Up to refusingAtOnce at a time drain for up to lingerTimeout, so the
// client reads the answer even if it sent its request already (closing a
// connection with unread bytes resets it); past that they are closed at
// once, which may reset them: what matters then is the descriptor.
func (l *capListener) refuse(c net.Conn) {
	l.c.OnEvent(CapRefused)
	if n, ok := l.refusedLog.Allow(time.Now()); ok {
		l.log.Warn("refusing connections: the port is at its connection cap ("+l.c.Setting+") and every connection is busy",
			"max_connections", l.max, "refused", n)
	}
	// A new connection's send buffer is empty: the write does not wait.
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write(l.refusal()); err != nil {
		_ = c.Close()
		return
	}
	l.mu.Lock()
	if l.closed || len(l.lingering) >= refusingAtOnce {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	l.lingering[c] = struct{}{}
	l.drained.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.drained.Done()
		lingerClose(c)
		l.mu.Lock()
		delete(l.lingering, c)
		l.mu.Unlock()
	}()
}

// refusal is the whole answer to a connection past the cap.
func (l *capListener) refusal() []byte {
	body := "this server holds as many connections as it may"
	if l.c.Setting != "" {
		body += " (" + l.c.Setting + ")"
	}
	body += "; try again\n"
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// lingerClose closes c, to which an answer was just written, so that the
// answer reaches the client: it shuts c's write side (the client reads the
// answer, then the end of the stream), then reads and discards what the
// client still sends until the client closes its side or lingerTimeout
// passes.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
		_, _ = io.Copy(io.Discard, c)
	}
	_ = c.Close()
}

// connState is the server's ConnState hook: it keeps the lists of the
// connections waiting for a request.
func (l *capListener) connState(c net.Conn, s http.ConnState) {
	cc, ok := c.(*capConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cc.closed.Load() || cc.taken {
		return
	}
	switch s {
	case http.StateIdle:
		cc.unlist()
		cc.since, cc.new = time.Now(), false
		l.idle.push(cc)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		cc.unlist()
	}
}

// Close stops accepting and closes the refused connections still draining.
// It may be called more than once.
func (l *capListener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		for c := range l.lingering {
			_ = c.Close()
		}
		l.mu.Unlock()
		close(l.done)
	})
	return l.Listener.Close()
}

// wait waits for the refused connections' goroutines, which Close ends.
func (l *capListener) wait() { l.drained.Wait() }

func (l *capListener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// capConn is an admitted connection, counted until it is first closed.
// A hijacked connection is this one too, so its new owner's close gives
// its place back.
type capConn struct {
	net.Conn
	l      *capListener
	closed atomic.Bool

	// Guarded by l.mu: the list it waits in (nil if none), its neighbours
	// there, since when it waits, whether it has not sent a request yet,
	// and whether it was taken to be closed for a new connection.
	list       *connList
	prev, next *capConn
	since      time.Time
	new        bool
	taken      bool
}

// Close closes the connection and, the first time, gives its place back.
func (c *capConn) Close() error {
	err := c.Conn.Close()
	if !c.closed.Swap(true) {
		c.l.open.Add(-1)
		c.l.mu.Lock()
		c.unlist()
		c.l.mu.Unlock()
	}
	return err
}

// CloseWrite shuts the write side, as net/http's server does before it
// closes a connection whose request it did not read to the end.
func (c *capConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// connList is a list of waiting connections, in the order they started
// waiting; guarded by capListener.mu.
type connList struct{ head, tail *capConn }

// push appends c, which is in no list.
func (q *connList) push(c *capConn) {
	c.list, c.prev, c.next = q, q.tail, nil
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
}

// unlist takes c out of its list, if it is in one.
func (c *capConn) unlist() {
	q := c.list
	if q == nil {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.list, c.prev, c.next = nil, nil, nil
}
