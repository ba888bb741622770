package portcap

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/pkg/logging"
)

// Config is a port's policy.
type Config struct {
	// Max is the most connections open at once; 0 or less: no cap.
	Max int
	// Setting names the setting Max comes from ("--max-connections"): in
	// the refusal's body and, as a log field (max_connections), in the
	// warnings.
	Setting string
	// Refusing is the warning logged while connections are refused at
	// the cap.
	Refusing string
	// Logger gets the warnings; nil: none.
	Logger hclog.Logger
	// OnEvent, if set, is called for every connection refused and every
	// failed accept; from the accept loop, so it must not block.
	OnEvent func(Event)
}

// Event is what a Port reports to Config.OnEvent.
type Event uint8

const (
	// Refused is a connection over the cap, answered Refusal and closed.
	Refused Event = iota + 1
	// ClosedIdle is a keep-alive connection waiting for its next request,
	// closed to admit a new one (lifecycle's capped server).
	ClosedIdle
	// ClosedNew is a connection that had not sent a whole request head in
	// time, closed to admit a new one (lifecycle's capped server).
	ClosedNew
	// AcceptFailed is a failed accept, retried after a backoff.
	AcceptFailed
)

func (e Event) String() string {
	switch e {
	case Refused:
		return "refused"
	case ClosedIdle:
		return "closed_idle"
	case ClosedNew:
		return "closed_new"
	case AcceptFailed:
		return "accept_failed"
	}
	return "unknown"
}

const (
	// MinBackoff is the first wait after a failed accept.
	MinBackoff = 5 * time.Millisecond
	// MaxBackoff is the longest wait after a failed accept.
	MaxBackoff = time.Second
	// RefusingAtOnce bounds the refused connections lingering at once,
	// each holding a descriptor for up to LingerTimeout.
	RefusingAtOnce = 16
	// LingerTimeout bounds how long LingerClose drains a connection.
	LingerTimeout = time.Second
)

// NextBackoff is the wait after a failed accept that follows a wait of d
// (0 after a successful accept): doubled, within its bounds.
func NextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, MinBackoff), MaxBackoff)
}

// Port applies a Config to a listening port.
type Port struct {
	c       Config
	max     int64
	maxKey  string // Setting as a log field
	log     hclog.Logger
	refusal []byte

	// open counts the connections admitted and not yet closed.
	open atomic.Int64

	mu sync.Mutex
	// lingering are the refused connections still draining.
	lingering map[net.Conn]struct{}
	closed    bool
	done      chan struct{} // closed by Close: ends a backoff
	closeOnce sync.Once
	drained   sync.WaitGroup // the lingering connections' goroutines

	refusedLog, acceptLog logging.Limiter
}

// New is a Port applying c.
func New(c Config) *Port {
	p := &Port{c: c, max: int64(max(c.Max, 0)), log: c.Logger, refusal: refusal(c.Setting),
		maxKey:    strings.ReplaceAll(strings.TrimLeft(c.Setting, "-"), "-", "_"),
		lingering: map[net.Conn]struct{}{}, done: make(chan struct{})}
	if p.maxKey == "" {
		p.maxKey = "max"
	}
	if p.log == nil {
		p.log = hclog.NewNullLogger()
	}
	if p.c.OnEvent == nil {
		p.c.OnEvent = func(Event) {}
	}
	return p
}

// Max is the cap (0: none).
func (p *Port) Max() int64 { return p.max }

// Open is the number of connections admitted and not yet closed.
func (p *Port) Open() int64 { return p.open.Load() }

// Full reports whether a port with open connections is at its cap.
func (p *Port) Full(open int64) bool { return p.max > 0 && open >= p.max }

// Report passes e to Config.OnEvent.
func (p *Port) Report(e Event) { p.c.OnEvent(e) }

// Accept accepts the next connection from ln. A failed accept is reported
// (AcceptFailed) and retried after a backoff, so Accept returns an error
// only once ln or p is closed.
func (p *Port) Accept(ln net.Listener) (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err == nil {
			return c, nil
		}
		if p.isClosed() || errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		delay = NextBackoff(delay)
		p.AcceptFailed(err, delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return nil, net.ErrClosed
		}
	}
}

// AcceptFailed reports and logs a failed accept, retried in retryIn.
func (p *Port) AcceptFailed(err error, retryIn time.Duration) {
	p.c.OnEvent(AcceptFailed)
	if n, ok := p.acceptLog.Allow(time.Now()); ok {
		p.log.Warn("accepting a connection failed; retrying", "error", err, "retry_in", retryIn, "failures", n)
	}
}

// Refused reports and logs a connection refused at the cap, for a port
// that answers it itself (Refusal); Refuse does both.
func (p *Port) Refused() {
	p.c.OnEvent(Refused)
	if n, ok := p.refusedLog.Allow(time.Now()); ok {
		p.log.Warn(p.c.Refusing, p.maxKey, p.max, "refused", n)
	}
}

// Refusal is the whole answer to a connection over the cap.
func (p *Port) Refusal() []byte { return p.refusal }

func refusal(setting string) []byte {
	body := "this server holds as many connections as it may"
	if setting != "" {
		body += " (" + setting + ")"
	}
	body += "; try again\n"
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Retry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// Refuse answers c, a connection over the cap, with Refusal and closes it.
// Up to RefusingAtOnce at a time linger (LingerClose) on a goroutine, so
// the client reads the answer even if it sent its request already
// (closing with unread bytes resets the connection); past that they are
// closed at once, which may reset them: what matters then is the
// descriptor.
func (p *Port) Refuse(c net.Conn) {
	p.Refused()
	// A new connection's send buffer is empty: the write does not wait.
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write(p.refusal); err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.closed || len(p.lingering) >= RefusingAtOnce {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.lingering[c] = struct{}{}
	p.drained.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.drained.Done()
		LingerClose(c)
		p.mu.Lock()
		delete(p.lingering, c)
		p.mu.Unlock()
	}()
}

// Close ends a backoff in Accept and closes the refused connections still
// lingering. It may be called more than once.
func (p *Port) Close() {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		for c := range p.lingering {
			_ = c.Close()
		}
		p.mu.Unlock()
		close(p.done)
	})
}

// Wait waits for the lingering refusals' goroutines, which Close ends.
func (p *Port) Wait() { p.drained.Wait() }

func (p *Port) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Conn is a connection admitted under a Port's cap, counted until it is
// first closed. A hijacked connection is this one too, or wraps it, so
// its new owner's close gives its place back.
type Conn struct {
	net.Conn
	p        *Port
	closed   atomic.Bool
	released func()
}

// Admit counts c in; released, if not nil, is called at its first Close,
// once its place is given back.
func (p *Port) Admit(c net.Conn, released func()) *Conn {
	p.open.Add(1)
	return &Conn{Conn: c, p: p, released: released}
}

// Close closes the connection and, the first time, gives its place back.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	if !c.closed.Swap(true) {
		c.p.open.Add(-1)
		if c.released != nil {
			c.released()
		}
	}
	return err
}

// Closed reports whether Close was called.
func (c *Conn) Closed() bool { return c.closed.Load() }

// CloseWrite shuts the write side (LingerClose), as net/http's server
// does before it closes a connection whose request it did not read to
// the end.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// LingerClose closes c, to which an answer was just written, so that the
// answer reaches the client: it shuts c's write side (the client reads
// the answer, then the end of the stream), then reads and discards what
// the client still sends until the client closes its side or
// LingerTimeout passes. Closing at once with the client's bytes unread
// would reset the connection instead: a client that reads only once it
// has sent its request would never see the answer.
func LingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.SetReadDeadline(time.Now().Add(LingerTimeout))
		_, _ = io.Copy(io.Discard, c)
	}
	_ = c.Close()
}

// Clip quotes client input for an error message, shortened to 64 bytes.
func Clip(s string) string {
	const limit = 64
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return strconv.Quote(s)
}
