package wsnode

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
	"unsafe"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/evloop"
	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/wsframe"
	"github.com/headcount/headcount/pkg/wsfront"
)

// The event-loop transport (--transport eventloop): a loop per core reads
// every socket (pkg/evloop), the front reads request heads on it
// (wsfront.LoopFront), and the node decodes frames (pkg/wsframe) as they
// arrive. An idle socket has no goroutine and holds no buffer: a socket
// and its loopLink. A whole message is handled on a goroutine, as on the
// other transport (handlers wait on Redis and must never stall a loop),
// one message of a socket at a time and in order; writes never wait
// (evloop keeps what the socket's buffer does not take).

// loopLink is a socket's link on the event loop, and its connection's
// evloop.Handler.
type loopLink struct {
	s   *socket
	c   *evloop.Conn
	dec wsframe.Decoder

	mu lockorder.Mutex[rankLink]
	// inbox holds what the loop decoded and the socket's handler has not
	// handled yet, in order; nearly always empty.
	inbox      []inMessage
	inboxBytes int
	// busy is set while a goroutine handles the inbox (run); at most one
	// does, so a socket's frames are handled one at a time.
	busy bool
	// paused says why reading is paused (pauseInbox, pausePongs,
	// pauseOver); it resumes once no reason is left.
	paused uint8
	// ended is set once the connection ended or the handler gave up on
	// it; endErr says why. closed runs once, after the last handler.
	ended bool
	// readDone is set once the client's close (or a failure) was read:
	// what follows is ignored. quiet is set once the decoder knows that a
	// close frame was sent. Both are the read path's alone.
	readDone, quiet bool
	// closeSent is set once a close frame was queued: nothing follows it;
	// sentCode is that frame's code.
	closeSent bool
	sentCode  uint16
	// endErr follows the flags so that they share a word, which keeps the
	// link in the 160-byte size class.
	endErr error
	// head is the 101 response, sent with the first frame.
	head []byte
	// flushSent is how many frames a flush left pending (link.flush),
	// or 0: the socket's flushDone is due when they are out.
	flushSent int32
	// pongs and pongBytes are the pongs owed: written while output was
	// pending, not out yet. They count against the send queue's budgets
	// (maxQueueFrames, maxQueueBytes), past which reading pauses until the
	// output drains, as a handler waits for room for its replies; the
	// goroutine transport's reader waits on its pong's write the same way.
	pongs, pongBytes int32
}

// Why reading is paused (loopLink.paused).
const (
	pauseInbox uint8 = 1 << iota // the handler is inboxLimit behind
	pausePongs                   // the pongs owed fill the send queue's budget
	pauseOver                    // over the frame budget: the rest waits for the close
)

// pauseLocked pauses reading for why (l.mu held).
func (l *loopLink) pauseLocked(why uint8) {
	if l.paused == 0 {
		l.c.PauseRead()
	}
	l.paused |= why
}

// resumeLocked lifts why (l.mu held) and reads again if nothing else
// holds reading paused.
func (l *loopLink) resumeLocked(why uint8) {
	if l.paused&why == 0 {
		return
	}
	l.paused &^= why
	if l.paused == 0 {
		l.c.ResumeRead()
	}
}

// inMessage is one client message for the socket's handler, or (over)
// the mark that the client went past its frame budget, holding the bytes
// read behind the last frame within it.
type inMessage struct {
	sc   *scratch
	text bool
	over bool
}

// subscribeEvent marks a queued message that is likely a subscribe: the
// answers of a run of them are held for one wait (heldAnswers). A message
// it misjudges costs nothing: whatever it is, its handling sends the
// held answers first.
var subscribeEvent = []byte(`"pusher:subscribe"`)

// Loop transport limits.
const (
	// inboxLimit pauses reading a socket whose handler is this many bytes
	// behind; pusher-js's whole reconnect burst fits well below it.
	inboxLimit = 256 << 10
)

// serveLoop is the LoopFront's UpgradeFunc: the event loop's serveWS.
func (a *App) serveLoop(c *evloop.Conn, w http.ResponseWriter, r *http.Request, early []byte) bool {
	if !a.hub.enter() {
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return false
	}
	if !a.originAllowed(w, r) {
		a.hub.leave()
		return false
	}
	if wsframe.Refuse(w, r) {
		a.hub.leave()
		return false // answered with an HTTP error, as websocket.Accept does
	}
	s := a.newSocket(r)
	l := &loopLink{s: s, c: c, head: wsframe.AppendAcceptResponse(nil, r.Header.Get("Sec-WebSocket-Key")), busy: true}
	s.link = l
	c.SetHandler(l)
	if !a.hub.add(s) {
		l.mu.Lock()
		l.ended = true // never opened: nothing to release
		l.mu.Unlock()
		l.shut(protocol.CodeReconnect, "server shutting down")
		a.m.disconnected(endCode(l, nil))
		a.hub.leave()
		c.ResumeRead() // for the client's close frame
		return true
	}
	if !s.open(r) {
		l.mu.Lock()
		l.ended = true // refused (open answered): nothing to release
		l.mu.Unlock()
		a.hub.leave()
		c.ResumeRead() // for the client's close frame
		return true
	}
	var buf [headroom + 128]byte
	if err := s.write(connectionEstablished(buf[:], s.id)); err != nil {
		// The client went away during its upgrade, before the socket
		// had its handler: the loop told the front, so end it here.
		l.end(err)
	} else {
		a.m.sent.Inc()
	}
	if len(early) > 0 {
		l.OnData(c, early)
	}
	l.mu.Lock()
	if l.paused == 0 { // else early paused it: whatever did resumes it
		c.ResumeRead()
	}
	l.mu.Unlock()
	l.run()
	return true
}

// OnData decodes what the loop read (or what came behind the request
// head): messages go to the handler's inbox, pings and a close are
// answered. Every frame is charged to the socket's frame budget before
// it is acted on; the first frame past it, and what follows, wait for the
// handler's close (overBudget). It runs on the loop, or with reading
// paused on the upgrade's goroutine or the handler's, never two at once.
func (l *loopLink) OnData(_ *evloop.Conn, b []byte) {
	if l.readDone {
		return
	}
	if !l.quiet && l.closeSentRead() {
		// Data frames are skipped while the client's close is awaited.
		l.quiet = true
		l.dec.SentClose()
	}
	s := l.s
	start := false
	for {
		budget := -1 // none once our close is out: nothing but its answer is read
		if !l.quiet {
			budget = int(max(s.frameTokens(), 0))
		}
		ev, n, frames := l.dec.NextN(b, s.node.tun.readLimit, budget)
		if budget >= 0 {
			s.frames -= int32(frames) //nolint:gosec // G115: at most budget, an int32
		}
		b = b[n:]
		switch ev.Kind {
		case wsframe.None:
			if start {
				go l.run()
			}
			return
		case wsframe.Budget:
			if l.overBudget(b) || start {
				go l.run()
			}
			return
		case wsframe.Message:
			sc := scratchPool.Get().(*scratch)
			sc.in.Reset()
			sc.in.Write(ev.Payload)
			start = l.push(inMessage{sc: sc, text: ev.Op == wsframe.OpText}, len(ev.Payload)) || start
		case wsframe.Ping:
			// Answered at once, as coder/websocket does: ahead of replies
			// its handler has not queued yet.
			l.s.lastSeen.Store(l.s.node.hub.now.Load())
			l.mu.Lock()
			if !l.closeSent {
				pong := ev.Reply(nil)
				if done, err := l.send(pong); !done && err == nil {
					l.pongs++
					l.pongBytes += int32(len(pong)) //nolint:gosec // G115: a pong is at most 127 bytes
					if l.pongs >= maxQueueFrames || l.pongBytes >= maxQueueBytes {
						l.pauseLocked(pausePongs)
					}
				}
			}
			l.mu.Unlock()
		case wsframe.Pong:
		case wsframe.Close, wsframe.Fail:
			l.readDone = true
			l.dec.Reset()
			l.closeRead(ev)
			if start {
				go l.run()
			}
			return
		}
	}
}

// push adds m to the inbox and reports whether a handler must be started.
func (l *loopLink) push(m inMessage, size int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		putScratch(m.sc)
		return false
	}
	l.inbox = append(l.inbox, m)
	l.inboxBytes += size
	if l.inboxBytes > inboxLimit {
		l.pauseLocked(pauseInbox)
	}
	start := !l.busy
	l.busy = true
	return start
}

// overBudget stops reading at the first frame past the socket's frame
// budget: rest, that frame and what followed it in the read, goes to the
// inbox behind the messages before it, and reading pauses. The handler
// then answers as the goroutine transport does (overFloodMark): the
// messages first, then pusher:error and close 4100, and only then are
// rest and what follows read, as a close's answer is.
func (l *loopLink) overBudget(rest []byte) bool {
	sc := scratchPool.Get().(*scratch)
	sc.in.Reset()
	sc.in.Write(rest)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pauseLocked(pauseOver)
	if l.ended {
		putScratch(sc)
		return false
	}
	l.inbox = append(l.inbox, inMessage{sc: sc, over: true})
	start := !l.busy
	l.busy = true
	return start
}

// overFloodMark is the handler's turn at the mark overBudget left: the
// frame budget's close, then the bytes held back, read as the close's
// answer, and reading again. Without a close of its own out (another
// close was under way), the connection is cut.
func (l *loopLink) overFloodMark(sc *scratch) error {
	_ = l.s.answerHeld(sc)
	err := l.s.overFrameRate()
	if !l.closeSentRead() {
		l.c.Close()
		return err
	}
	l.OnData(l.c, sc.in.Bytes()) // reading is paused: the loop does not call it meanwhile
	l.mu.Lock()
	l.resumeLocked(pauseOver)
	l.mu.Unlock()
	return err
}

// closeRead answers the client's close frame, or a frame that fails the
// connection, as coder/websocket does, and ends the socket.
func (l *loopLink) closeRead(ev wsframe.Event) {
	var err error
	if ev.Kind == wsframe.Close {
		err = websocket.CloseError{Code: websocket.StatusCode(ev.Code), Reason: string(ev.Payload)}
	} else {
		err = ev.Err
		if ev.Code == wsframe.StatusMessageTooBig {
			err = fmt.Errorf("%w: %w", websocket.ErrMessageTooBig, ev.Err)
		}
	}
	l.mu.Lock()
	answered := l.closeSent
	l.closeSent = true
	if !answered {
		if reply := ev.Reply(nil); len(reply) > 0 {
			_, _ = l.send(reply)
			l.sentCode = uint16(ev.Code) //nolint:gosec // G115: a close frame's code is 16 bits
		}
	}
	l.mu.Unlock()
	if answered {
		l.c.Close() // the client answered our close
	} else {
		l.c.CloseAfterFlush()
	}
	l.end(err)
}

// run handles the inbox until it is empty, then returns; once the
// connection ended it releases the socket (closed) instead.
func (l *loopLink) run() {
	var held heldAnswers
	for {
		l.mu.Lock()
		if l.ended {
			for _, m := range l.inbox {
				putScratch(m.sc)
			}
			l.inbox = nil
			err := l.endErr
			l.mu.Unlock()
			l.s.closed(err)
			l.s.node.hub.leave()
			return
		}
		if len(l.inbox) == 0 {
			l.inbox = nil
			l.busy = false
			l.mu.Unlock()
			return
		}
		m := l.inbox[0]
		l.inbox[0] = inMessage{}
		l.inbox = l.inbox[1:]
		held.more = len(l.inbox) > 0 && !l.inbox[0].over && bytes.Contains(l.inbox[0].sc.in.Bytes(), subscribeEvent)
		if !m.over {
			l.inboxBytes -= m.sc.in.Len()
		}
		if l.inboxBytes <= inboxLimit/2 {
			l.resumeLocked(pauseInbox)
		}
		l.mu.Unlock()
		m.sc.held = &held
		var err error
		if m.over {
			err = l.overFloodMark(m.sc)
		} else {
			err = l.s.serveMessage(m.sc, m.text)
		}
		m.sc.held = nil
		putScratch(m.sc)
		if err != nil {
			l.end(err)
		}
	}
}

// end marks the socket's connection ended (err says why, the first
// reason wins) and starts its release if no handler is running.
func (l *loopLink) end(err error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended, l.endErr = true, err
	start := !l.busy
	l.busy = true
	l.mu.Unlock()
	if start {
		go l.run()
	}
}

func (l *loopLink) OnDrained(*evloop.Conn) {
	l.s.writeSince.Store(0)
	l.mu.Lock()
	sent := l.flushSent
	l.flushSent = 0
	l.pongs, l.pongBytes = 0, 0
	l.resumeLocked(pausePongs)
	l.mu.Unlock()
	if sent > 0 {
		l.s.flushDone(int(sent), nil)
	}
}

func (l *loopLink) OnClose(_ *evloop.Conn, err error) {
	if err == nil {
		err = io.EOF
	}
	l.mu.Lock()
	pending := l.flushSent > 0
	l.flushSent = 0
	l.mu.Unlock()
	if pending {
		l.s.flushDone(0, net.ErrClosed)
	}
	l.end(err)
}

// closeSentRead reports, to the read path, whether a close frame was sent.
func (l *loopLink) closeSentRead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closeSent
}

// send writes b behind whatever is pending, the 101 first (l.mu held or
// not: evloop keeps writes in order).
func (l *loopLink) send(bufs ...[]byte) (bool, error) {
	if l.head != nil {
		bufs = append([][]byte{l.head}, bufs...)
		l.head = nil
	}
	done, err := l.c.Write(bufs...)
	if !done && err == nil && l.s.writeSince.Load() == 0 {
		l.s.writeSince.Store(l.s.node.hub.now.Load())
	}
	return done, err
}

func (l *loopLink) write(f frame) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeSent {
		return net.ErrClosed
	}
	_, err := l.send(f)
	return err
}

func (l *loopLink) flush(batch []frame) (int, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeSent {
		return 0, false, net.ErrClosed
	}
	// A frame is a []byte: the batch is handed over as is, not copied.
	out, err := l.send(*(*[][]byte)(unsafe.Pointer(&batch))...) //nolint:gosec // G103: []frame and [][]byte have one layout
	switch {
	case err != nil:
		return 0, false, err
	case !out:
		l.flushSent = int32(len(batch)) //nolint:gosec // G115: a batch is at most the queue's frames
		return 0, true, nil
	}
	return len(batch), false, nil
}

func (l *loopLink) shut(code protocol.Code, reason string) {
	l.mu.Lock()
	if l.closeSent {
		l.mu.Unlock()
		return
	}
	l.closeSent, l.sentCode = true, uint16(code) //nolint:gosec // G115: close codes are 16 bits
	_, err := l.send(wsframe.AppendClose(nil, wsframe.StatusCode(code), reason))
	l.mu.Unlock()
	if err != nil {
		l.c.Close()
		return
	}
	// The client's close frame ends it (closeRead), or the timeout does.
	time.AfterFunc(l.s.node.tun.closeTimeout, l.c.Close)
}

func (l *loopLink) shutWaits() bool { return false }

func (l *loopLink) cut() { l.c.Close() }

func (l *loopLink) sentClose() uint16 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sentCode
}

// release leaves a connection whose close frame is out to its handshake
// (the client's close or closeTimeout ends it).
func (l *loopLink) release() {
	l.mu.Lock()
	handshaking := l.closeSent
	l.mu.Unlock()
	if !handshaking {
		l.c.Close()
	}
}

// listenLoop binds the event loop's front and registers its gauges.
func (a *App) listenLoop(addr string, opts wsfront.Options) (port, error) {
	f, err := wsfront.ListenLoop(addr, opts, a.serveLoop)
	if err != nil {
		return nil, err
	}
	a.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_wsnode_event_loops",
		Help: "Event loops serving the WebSocket port (--transport eventloop): one per core.",
	}, func() float64 { return float64(f.Stats().Loops) }))
	a.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_wsnode_pending_write_bytes",
		Help: "Bytes written to sockets that their send buffers have not taken yet (clients reading slowly); each socket's share is bounded by its send queue.",
	}, func() float64 { return float64(f.Stats().PendingBytes) }))
	return f, nil
}
