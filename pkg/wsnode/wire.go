package wsnode

import (
	"encoding/binary"
	"net"
	"sync"
	"syscall"

	"github.com/headcount/headcount/pkg/protocol"
)

// frame is one complete WebSocket text frame as the node sends it: header
// and payload in one slice, written with one write(2). A delivery's frame
// is built once and written to every subscriber as is, since a server's
// frames are not masked (RFC 6455 section 5.1): no per-socket copy or
// framing, and a payload larger than a buffer still leaves in one write.
type frame []byte

// headroom is the room a payload is built behind for its frame header: the
// longest header of an unmasked frame (1 + 1 + 8 bytes).
const headroom = 10

// newPayload returns an empty buffer to append a frame's payload to (see
// framed), with room for size bytes of payload.
func newPayload(size int) []byte { return make([]byte, headroom, headroom+size) }

// framed turns b, a payload appended behind headroom bytes (newPayload, or
// a scratch buffer's first headroom bytes), into a final text frame in
// place; the frame is the tail of b that starts at its header.
func framed(b []byte) frame {
	n := len(b) - headroom
	var h int
	switch {
	case n < 126:
		h = 2
		b[headroom-1] = byte(n)
	case n <= 0xffff:
		h = 4
		b[headroom-3] = 126
		binary.BigEndian.PutUint16(b[headroom-2:], uint16(n))
	default:
		h = 10
		b[1] = 127
		binary.BigEndian.PutUint64(b[2:headroom], uint64(n))
	}
	b[headroom-h] = 0x81 // FIN, text
	return frame(b[headroom-h:])
}

// frameOf frames a copy of payload.
func frameOf(payload []byte) frame { return framed(append(newPayload(len(payload)), payload...)) }

// wire is a socket's connection under its websocket.Conn, shared by two
// writers: the node's writers send frames with tryFrame and writeFrame,
// and websocket.Conn sends its own control frames (pongs, the close)
// through Write, one flush of its buffer per frame. mu keeps each frame
// whole, so the two never interleave on the wire.
type wire struct {
	net.Conn
	// raw writes without waiting (tryFrame); nil if Conn has no file
	// descriptor, and then finish writes every frame.
	raw syscall.RawConn
	mu  sync.Mutex
	// pending is the handshake's 101 response, sent in one write with the
	// first frame (one write(2) fewer per socket).
	pending []byte
	// closeSent is set once websocket.Conn sent a close frame: no data
	// frame may follow it.
	closeSent bool
}

func newWire(c net.Conn, pending []byte) *wire {
	w := &wire{Conn: c, pending: pending}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			w.raw = raw
		}
	}
	return w
}

// opClose is the first byte of a final close frame.
const opClose = 0x88

// Write carries websocket.Conn's own frames. Its buffer holds nothing but
// them, each flushed whole, so every Write starts with a frame's first byte.
func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > 0 && p[0] == opClose {
		w.closeSent = true
	}
	return w.send(p)
}

// writeFrame sends f, waiting for room in the socket's buffer, unless the
// connection sent its close frame already.
func (w *wire) writeFrame(f frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closeSent {
		return net.ErrClosed
	}
	_, err := w.send(f)
	return err
}

// tryFrame sends as much of f as the socket's buffer takes now, without
// waiting, and returns how much that was. When it is less than f, w stays
// locked, mid-frame, and the caller must send the rest with finish (from
// any goroutine): nothing else may go out in between.
func (w *wire) tryFrame(f frame) (int, error) {
	w.mu.Lock()
	if w.closeSent {
		w.mu.Unlock()
		return 0, net.ErrClosed
	}
	if w.raw == nil || w.pending != nil {
		return 0, nil // finish writes it, the 101 first
	}
	var n int
	var werr error
	err := w.raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), f)
			if werr != syscall.EINTR {
				return true // never wait: that is finish's job
			}
		}
	})
	switch {
	case err != nil:
		werr = err
	case werr == syscall.EAGAIN:
		n, werr = 0, nil
	}
	if werr != nil || n >= len(f) {
		w.mu.Unlock()
		if werr != nil {
			return 0, werr
		}
		return len(f), nil
	}
	return max(n, 0), nil
}

// finish sends rest, what tryFrame could not, waiting for room, and
// unlocks w.
func (w *wire) finish(rest []byte) error {
	defer w.mu.Unlock()
	_, err := w.send(rest)
	return err
}

// send writes p, behind the pending 101 if it was not sent yet (w.mu held).
func (w *wire) send(p []byte) (int, error) {
	if w.pending == nil {
		return w.Conn.Write(p)
	}
	// One write(2) for both: a copy of two short messages costs less than
	// a second syscall (Conn is wrapped, so net.Buffers would not writev).
	head := len(w.pending)
	b := append(w.pending, p...)
	w.pending = nil
	n, err := w.Conn.Write(b)
	return max(n-head, 0), err
}

// pongFrame is the reply to every pusher:ping.
var pongFrame = frameOf(protocol.Pong)
