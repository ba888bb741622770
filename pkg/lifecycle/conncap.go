package lifecycle

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/portcap"
)

const (
	// reclaimNewAfter is how long a new connection may go without sending a
	// whole request head before it may be closed to make room: long enough
	// for any client that sends its request as it connects, so that a burst
	// of new connections past the cap is refused rather than made to close
	// each other before their requests arrive.
	reclaimNewAfter = time.Second
)

// ListenCapped is Listen with the port policy c (pkg/portcap): a cap on
// the connections open on the port (c.Max; 0: none), counted from their
// accept to their first close, however it comes: the client's, a
// timeout's, Shutdown's, or the close of a hijacked connection by its new
// owner. A connection accepted at the cap takes the place of the
// connection that has waited longest for a request, as nginx reuses
// keep-alive connections under pressure: a keep-alive connection between
// requests, or one that has not sent a whole request head within a second
// of its accept. If every connection is busy (a request in progress, or a
// new connection still within its second), the new one is refused
// (portcap.Port.Refuse). Failed accepts back off (portcap.Port.Accept).
// Each kind of event is logged at most once per 10 s, with its count.
func ListenCapped(addr string, h http.Handler, t Timeouts, c portcap.Config) (*Server, error) {
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
	port    *portcap.Port
	setting string
	log     hclog.Logger
	// reclaimNewAfter is reclaimNewAfter (tests change it before Serve).
	reclaimNewAfter time.Duration

	mu sync.Mutex
	// idle and fresh are the connections waiting for a request, oldest
	// first: keep-alive ones between requests, and new ones that have not
	// sent their first request head yet.
	idle, fresh connList

	// closedLog holds the warning about closing waiting connections to one
	// per logging.RepeatEvery; only Accept uses it.
	closedLog logging.Limiter
}

func newCapListener(ln net.Listener, c portcap.Config) *capListener {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Refusing = "refusing connections: the port is at its connection cap (" + c.Setting + ") and every connection is busy"
	return &capListener{Listener: ln, port: portcap.New(c), setting: c.Setting, log: c.Logger, reclaimNewAfter: reclaimNewAfter}
}

// Accept returns the next connection admitted under the cap. It refuses
// the connections it cannot admit itself, and retries failed accepts
// after a backoff, so that it returns an error only once the listener is
// closed.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.port.Accept(l.Listener)
		if err != nil {
			return nil, err
		}
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
	var event portcap.Event
	if l.port.Full(l.port.Open()) {
		if victim, event = l.victim(now); victim == nil {
			l.mu.Unlock()
			l.port.Refuse(c)
			return nil
		}
	}
	cc := &capConn{l: l, since: now, new: true}
	cc.Conn = l.port.Admit(c, cc.released)
	l.fresh.push(cc)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Close() // its place is the new one's
		l.port.Report(event)
		if n, ok := l.closedLog.Allow(now); ok {
			l.log.Warn("closing the connections that waited longest for a request to admit new ones: the port is at its connection cap ("+l.setting+")",
				"max_connections", l.port.Max(), "closed", n)
		}
	}
	return cc
}

// victim takes out of its list the connection to close for a new one:
// of the keep-alive connection idle longest and the new connection
// without a request head longest (if for at least reclaimNewAfter), the
// one that has waited longer, with the event its close is; nil if
// neither. Called with l.mu held.
func (l *capListener) victim(now time.Time) (*capConn, portcap.Event) {
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
		return v, portcap.ClosedNew
	}
	return v, portcap.ClosedIdle
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
	if cc.Closed() || cc.taken {
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
	l.port.Close()
	return l.Listener.Close()
}

// wait waits for the refused connections' goroutines, which Close ends.
func (l *capListener) wait() { l.port.Wait() }

// capConn is an admitted connection, counted until it is first closed.
// A hijacked connection is this one too, so its new owner's close gives
// its place back.
type capConn struct {
	*portcap.Conn
	l *capListener

	// Guarded by l.mu: the list it waits in (nil if none), its neighbours
	// there, since when it waits, whether it has not sent a request yet,
	// and whether it was taken to be closed for a new connection.
	list       *connList
	prev, next *capConn
	since      time.Time
	new        bool
	taken      bool
}

// released takes c, closed, out of its list.
func (c *capConn) released() {
	c.l.mu.Lock()
	c.unlist()
	c.l.mu.Unlock()
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
