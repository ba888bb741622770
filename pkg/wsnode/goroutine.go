package wsnode

import (
	"context"
	"errors"
	"net/http"

	"github.com/coder/websocket"

	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/wsfront"
)

// The goroutine transport (--transport goroutine): the front (wsfront)
// accepts and reads the request head, coder/websocket upgrades and frames,
// and each socket has one goroutine, parked in the runtime's poller while
// the socket is idle (socketConn.waitReadable). It is the fallback and the
// event loop's reference: the two must answer the same bytes alike.

// goLink is a socket's link on the goroutine transport.
type goLink struct {
	s    *socket
	conn *websocket.Conn
	// wire is conn's connection, which the writers send frames on and
	// the socket's goroutine waits on between frames.
	wire *socketConn
}

// serveWS upgrades a connection to /app/{key} and starts its read loop on a
// goroutine of its own: the socket's only goroutine.
func (a *App) serveWS(w http.ResponseWriter, r *http.Request) {
	if !a.hub.enter() {
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer a.hub.leave()

	if !a.originAllowed(w, r) {
		return
	}
	// The id is set before the socket is shared with the sweeper and drain.
	s := a.newSocket(r)
	// w is front's: the connection comes with small buffers and the 101
	// waits in the socketConn for connection_established.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Pusher accepts any origin; an app's allowedOrigins were
		// checked before (originAllowed).
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
		OnPingReceived: func(context.Context, []byte) bool {
			s.lastSeen.Store(a.hub.now.Load())
			return true
		},
	})
	if err != nil {
		return // Accept has answered with an HTTP error, which front logs
	}
	wire, _ := wsfront.Upgraded(w).(*socketConn)
	l := &goLink{s: s, conn: c, wire: wire}
	s.link = l
	if wire != nil {
		wire.s = s // its frames count against s's budget (socketConn.check)
	}
	c.SetReadLimit(a.tun.readLimit)
	if !a.hub.add(s) {
		_ = c.Close(websocket.StatusCode(protocol.CodeReconnect), "server shutting down")
		a.m.disconnected(endCode(l, nil))
		return
	}
	if !s.open(r) {
		return
	}
	// The handshake's goroutine serves the first frame (its stack has grown
	// already), then hands the socket to a fresh goroutine whose stack grows
	// only as deep as the read loop needs (see run).
	a.hub.handOff()
	l.run(true)
}

// run serves one frame of the socket (first: the connection_established
// before it), then hands the socket to a fresh goroutine and returns. So the
// goroutine waiting on an idle socket has a stack as deep as the wait, not
// as deep as the deepest handler went: a goroutine's stack grows in the
// handlers and never shrinks while the wait uses a quarter of it
// (measured at 10,000 idle sockets: 8 KiB of stack each before, 4 KiB
// after). A goroutine start per client frame is cheap next to the frame's
// handling, and there is still one goroutine per socket at any time.
// The wait itself is the socketConn's (waitReadable): 560 bytes of frames, which fit
// the smallest stack, 2 KiB; parked in websocket.Conn's read path it took
// 1,960 bytes and a 4 KiB stack.
func (l *goLink) run(first bool) {
	s := l.s
	var err error
	handedOff := false
	// Deferred so that even a panic uncounts the socket's channels: a
	// leaked +1 would stay in Redis until restart.
	defer func() {
		if !handedOff {
			s.closed(err)
			s.node.hub.leave()
		}
	}()
	if first {
		var buf [headroom + 128]byte
		// Written directly: nothing can be queued before the first subscribe.
		if err = s.write(connectionEstablished(buf[:], s.id)); err != nil {
			return
		}
		s.node.m.sent.Inc()
	} else {
		l.wire.waitReadable()
	}
	if err = l.serveFrame(); err == nil {
		handedOff = true
		go l.run(false)
	}
}

// serveFrame reads one message of the socket and has the node handle it.
func (l *goLink) serveFrame() error {
	// No deadline on the read: the sweeper closes silent sockets, so the
	// read path arms no timer.
	typ, rd, err := l.conn.Reader(context.Background())
	if err != nil {
		return l.readFailed(err)
	}
	sc := scratchPool.Get().(*scratch)
	defer putScratch(sc)
	sc.in.Reset()
	if _, err := sc.in.ReadFrom(rd); err != nil {
		return l.readFailed(err)
	}
	return l.s.serveMessage(sc, typ == websocket.MessageText)
}

// readFailed ends the socket after a failed read: with the frame budget's
// close when the socketConn found the client past it.
func (l *goLink) readFailed(err error) error {
	if errors.Is(err, errFrameRate) {
		return l.s.overFrameRate()
	}
	return err
}

// write waits for room in the socket's buffer (the socketConn keeps
// concurrent frames whole). The sweeper watches writeSince, so a client
// that stops reading is cut after writeTimeout without a timer per write.
func (l *goLink) write(f frame) error {
	l.s.writeSince.Store(l.s.node.hub.now.Load())
	err := l.wire.writeFrame(f)
	l.s.writeSince.Store(0)
	return err
}

// flush never waits for a client: when the socket's buffer is full, a
// goroutine of the socket's own (finish) waits for room and writes the
// rest, and the writer moves on. So the pool needs no more writers than
// cores, and a thousand clients that stop reading hold up none of them.
func (l *goLink) flush(batch []frame) (int, bool, error) {
	for i, f := range batch {
		n, err := l.wire.tryFrame(f)
		if err != nil {
			return i, false, err
		}
		if n < len(f) {
			l.s.node.send.wg.Go(func() { l.finish(f[n:], batch[i+1:]) })
			return i, true, nil
		}
	}
	return len(batch), false, nil
}

// finish writes rest (the tail of a frame flush began) and the frames
// after it, waiting for room; the sweeper's write timeout bounds the wait.
func (l *goLink) finish(rest []byte, batch []frame) {
	l.s.writeSince.Store(l.s.node.hub.now.Load())
	err := l.wire.finish(rest)
	l.s.writeSince.Store(0)
	sent := 0
	if err == nil {
		sent++
		for _, f := range batch {
			if err = l.write(f); err != nil {
				break
			}
			sent++
		}
	}
	l.s.flushDone(sent, err)
}

func (l *goLink) shut(code protocol.Code, reason string) {
	_ = l.conn.Close(websocket.StatusCode(code), reason)
	_ = l.conn.CloseNow()
}

func (l *goLink) shutWaits() bool { return true }

func (l *goLink) cut() { _ = l.conn.CloseNow() }

// release: a handshake (shut) is over by the time the handler returns.
func (l *goLink) release() { l.cut() }

func (l *goLink) sentClose() uint16 {
	if l.wire == nil {
		return 0
	}
	return uint16(l.wire.closeSent.Load()) //nolint:gosec // G115: a close frame's code is 16 bits
}
