package wsfront

import (
	"bytes"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headcount/headcount/pkg/evloop"
	"github.com/headcount/headcount/pkg/portcap"
)

// LoopFront is the Front of the event-loop transport: the same port rules
// (the request head's parsing and 10 s limit, the socket cap and its 503,
// /up, the refusals and their linger) on an evloop.Server, with no
// goroutine per connection. A connection costs a goroutine only while its
// upgrade is handled (Upgrade may wait on Redis); its request head is read
// on the loop.
type LoopFront struct {
	rules
	srv *evloop.Server
	// upgrade serves an upgrade's request (UpgradeFunc).
	upgrade UpgradeFunc
	// lingering counts the connections refused at the cap that drain
	// (portcap.LingerClose's loop form), bounded as Port.Refuse's are.
	lingering atomic.Int32
	// heads are the connections still sending their request head -> start
	// (unix ms), for the sweep.
	headsMu sync.Mutex
	heads   map[*headConn]int64
	// upgrades counts upgrades being handled (Shutdown waits for them).
	upgrades sync.WaitGroup
}

// UpgradeFunc serves a request for a path ParsePath accepts on a
// goroutine of its own. It answers through w as an http.Handler does (the front then sends that
// response and closes the connection), or takes the connection and
// reports true: it has set c's handler (evloop.Conn.SetHandler) and owns c
// from then on. Reading c is paused until it is taken: early holds what the
// client sent behind its head, which the new owner handles before it calls
// c.ResumeRead. A client that resets the connection while upgrade runs
// has it closed at once; if that happened before c's handler was set, the
// OnClose went to the front and never reaches the new one: a Write then
// fails with evloop.ErrClosed, which the owner must take as the end.
type UpgradeFunc func(c *evloop.Conn, w http.ResponseWriter, r *http.Request, early []byte) bool

// ListenLoop binds addr (TCP) for a LoopFront; Serve serves it. opts is as
// for Listen, without Handler and Hijack (upgrade takes their place):
// those are ignored.
func ListenLoop(addr string, opts Options, upgrade UpgradeFunc) (*LoopFront, error) {
	if upgrade == nil {
		return nil, errors.New("wsfront: no upgrade handler")
	}
	f := &LoopFront{upgrade: upgrade, heads: map[*headConn]int64{}}
	f.init(opts)
	srv, err := evloop.Listen(addr, evloop.Options{OnAccept: f.accept, OnAcceptError: f.port.AcceptFailed})
	if err != nil {
		return nil, err
	}
	f.srv = srv
	return f, nil
}

// Addr is the bound address.
func (f *LoopFront) Addr() string { return f.srv.Addr().String() }

// Stats are the loops' counters.
func (f *LoopFront) Stats() evloop.Stats { return f.srv.Stats() }

// Open is the number of connections open on the port, handshaking or
// upgraded: what MaxConns caps.
func (f *LoopFront) Open() int { return int(f.open()) }

// open is Open: the loop's count, from which a connection refused at the
// cap is taken at once (evloop.Conn.Uncount).
func (f *LoopFront) open() int64 { return f.srv.Stats().Conns }

// Serve runs the loops and accepts until Shutdown, then returns nil; the
// loops go on serving upgraded sockets until Close.
func (f *LoopFront) Serve() error {
	go f.sweepHeads()
	if err := f.srv.Serve(); !errors.Is(err, evloop.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting, closes the connections still sending their
// head, and waits up to timeout for upgrades being handled. Upgraded
// sockets are not touched: Close ends them.
func (f *LoopFront) Shutdown(timeout time.Duration) {
	f.stopAccepting()
	waited := make(chan struct{})
	go func() { f.upgrades.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(timeout):
		f.log.Warn("handshakes still in progress at shutdown", "waited", timeout)
	}
}

// stopAccepting is Shutdown without the wait.
func (f *LoopFront) stopAccepting() {
	f.mu.Lock()
	first := !f.closed
	if first {
		f.closed = true
		close(f.done)
	}
	f.mu.Unlock()
	if first {
		f.srv.StopAccepting()
	}
	f.headsMu.Lock()
	for h := range f.heads {
		h.c.Close()
	}
	clear(f.heads) // a head that completes now finds itself gone (takeHead)
	f.headsMu.Unlock()
}

// Close ends every connection and stops the loops (after the owner of the
// sockets drained them).
func (f *LoopFront) Close() error {
	f.stopAccepting()
	return f.srv.Close()
}

// accept takes a new connection: past the cap it gets the 503, else its
// request head is read (headConn).
func (f *LoopFront) accept(c *evloop.Conn) bool {
	// open counts c already.
	if f.port.Full(f.open() - 1) {
		if f.isClosed() {
			return false
		}
		f.port.Refused()
		c.Uncount()
		h := &headConn{f: f, c: c, capped: true}
		f.respond(c, h, f.port.Refusal())
		return true
	}
	h := &headConn{f: f, c: c}
	// Under headsMu, so that Shutdown, which marks the front closed before
	// it closes the heads, closes this one or it is refused here.
	f.headsMu.Lock()
	defer f.headsMu.Unlock()
	if f.isClosed() {
		return false
	}
	f.heads[h] = time.Now().UnixMilli()
	c.SetHandler(h)
	return true
}

// respond sends b, a whole response that ends the connection, and closes
// c so that the client reads it: half-closed, what the client still sends
// discarded for up to portcap.LingerTimeout (portcap.LingerClose).
// Connections refused at the cap (h.capped) do so at most
// portcap.RefusingAtOnce at a time, as portcap.Port.Refuse's do; past
// that, they are closed once b is out. Others hold a place under the cap
// meanwhile, which bounds them.
func (f *LoopFront) respond(c *evloop.Conn, h *headConn, b []byte) {
	h.linger = true
	c.SetHandler(h)
	if _, err := c.Write(b); err != nil {
		c.Close()
		return
	}
	if h.capped {
		// respond runs in accept for these, before c's first event: its
		// OnClose cannot come before counted is set.
		if f.lingering.Add(1) > portcap.RefusingAtOnce {
			f.lingering.Add(-1)
			// A fresh socket takes the 503 whole: it closes at once.
			c.CloseAfterFlush()
			return
		}
		h.counted = true
	}
	_ = c.CloseWrite() // once b is out
	time.AfterFunc(portcap.LingerTimeout, c.Close)
}

// sweepHeads closes connections that did not send their request head in time.
func (f *LoopFront) sweepHeads() {
	f.sweepLate(func(limit int64) {
		f.headsMu.Lock()
		defer f.headsMu.Unlock()
		for h, start := range f.heads {
			if start < limit {
				h.c.Close()
				delete(f.heads, h)
			}
		}
	})
}

// takeHead ends h's head phase; false if the sweep or Shutdown closed it.
// An upgrade is counted for Shutdown under the same lock: either it is
// counted before Shutdown waits, or Shutdown has closed h already.
func (f *LoopFront) takeHead(h *headConn, upgrade bool) bool {
	f.headsMu.Lock()
	defer f.headsMu.Unlock()
	_, ok := f.heads[h]
	delete(f.heads, h)
	if ok && upgrade {
		f.upgrades.Add(1)
	}
	return ok
}

// headConn is a connection's handler until its upgrade: it gathers the
// request head (the only buffer it holds, dropped at the upgrade), and
// then, for a refused one, discards what the client still sends.
type headConn struct {
	f       *LoopFront
	c       *evloop.Conn
	head    []byte
	linger  bool // a response was sent: discard input until the end
	counted bool // holds a place in f.lingering
	// capped: refused at the cap (uncounted at once)
	capped bool
}

func (h *headConn) OnData(c *evloop.Conn, b []byte) {
	if h.linger {
		return
	}
	from := max(0, len(h.head)-3)
	if h.head == nil {
		h.head = make([]byte, 0, headBufferSize)
	}
	h.head = append(h.head, b...)
	i := headEnd(h.head[from:])
	if i < 0 {
		if len(h.head) > maxHead {
			h.f.takeHead(h, false)
			h.refuse(http.StatusRequestHeaderFieldsTooLarge, errHeadTooLarge.Error()+": over 16384 bytes")
		}
		return
	}
	head, early := h.head[:from+i], bytes.Clone(h.head[from+i:])
	h.head = nil
	var r *http.Request
	status, err := http.StatusRequestHeaderFieldsTooLarge, errors.New("request head over 16384 bytes")
	if len(head) <= maxHead {
		r, status, err = h.f.route(head)
	}
	upgrade := r != nil && r.URL.Path != upPath
	if !h.f.takeHead(h, upgrade) {
		return // swept, or shut down, as it came in
	}
	switch {
	case r == nil:
		h.refuse(status, err.Error())
	case !upgrade:
		w := &upgradeWriter{}
		h.f.serveUp(w, r)
		h.f.reportRefusal(w, true, c.RemoteAddr())
		h.f.respond(c, h, w.response())
	default:
		c.PauseRead()
		go h.serve(r, early)
	}
}

// refuse answers the request head with status.
func (h *headConn) refuse(status int, msg string) {
	w := &upgradeWriter{}
	http.Error(w, msg, status)
	h.f.reportRefusal(w, false, h.c.RemoteAddr())
	h.f.respond(h.c, h, w.response())
}

// serve runs the upgrade handler; a response it leaves is sent here.
func (h *headConn) serve(r *http.Request, early []byte) {
	defer h.f.upgrades.Done()
	w := &upgradeWriter{}
	if h.f.upgrade(h.c, w, r, early) {
		return
	}
	h.f.reportRefusal(w, false, h.c.RemoteAddr())
	h.f.respond(h.c, h, w.response())
	h.c.ResumeRead()
}

func (h *headConn) OnDrained(*evloop.Conn) {}

func (h *headConn) OnClose(*evloop.Conn, error) {
	h.f.takeHead(h, false)
	if h.counted {
		h.f.lingering.Add(-1)
	}
}
