package wsnode

import (
	"encoding/binary"
	"errors"
	"net"
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
		b[headroom-1] = byte(n) //nolint:gosec // G115: n < 126 in this case
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

// socketConn's write side. Two writers share the connection: the node's
// writers send frames with tryFrame and writeFrame, and websocket.Conn
// sends its own control frames (pongs, the close) through Write. mu keeps
// each frame whole, so the two never interleave on the wire. The fields
// are in socketConn (sockread.go).

// opClose is the first byte of a final close frame.
const opClose = 0x88

// Write carries websocket.Conn's own frames. They reach it through a
// bufio.Writer of bufio's smallest size (an idle socket holds no real
// buffer), so a frame may come in pieces: they are gathered here, and each
// frame goes out whole under mu. websocket.Conn writes one frame at a time
// and flushes each, so what is gathered starts at a frame's first byte.
func (sr *socketConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	sr.gather = append(sr.gather, p...)
	if n, ok := frameLength(sr.gather); !ok || int64(len(sr.gather)) < n {
		return len(p), nil // more of the frame to come
	}
	f := sr.gather
	sr.gather = nil
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if f[0] == opClose {
		sr.closeSent.Store(uint32(sentCloseCode(f)))
	}
	_, err := sr.send(f)
	return len(p), err
}

// sentCloseCode is the status code of f, a close frame the node writes
// (unmasked, its payload under 126 bytes): 1005 when it carries none.
func sentCloseCode(f []byte) uint16 {
	if len(f) < 4 || f[1]&0x7f < 2 {
		return closeNoStatus
	}
	return binary.BigEndian.Uint16(f[2:4])
}

// writeFrame sends f, waiting for room in the socket's buffer, unless the
// connection sent its close frame already.
func (sr *socketConn) writeFrame(f frame) error {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.closeSent.Load() != 0 {
		return net.ErrClosed
	}
	_, err := sr.send(f)
	return err
}

// tryFrame sends as much of f as the socket's buffer takes now, without
// waiting, and returns how much that was. When it is less than f, sr stays
// locked, mid-frame, and the caller must send the rest with finish (from
// any goroutine): nothing else may go out in between.
func (sr *socketConn) tryFrame(f frame) (int, error) {
	sr.mu.Lock()
	if sr.closeSent.Load() != 0 {
		sr.mu.Unlock()
		return 0, net.ErrClosed
	}
	if sr.raw == nil || sr.pending != nil {
		return 0, nil // finish writes it, the 101 first
	}
	var n int
	var werr error
	err := sr.raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), f)
			if !errors.Is(werr, syscall.EINTR) {
				return true // never wait: that is finish's job
			}
		}
	})
	switch {
	case err != nil:
		werr = err
	case errors.Is(werr, syscall.EAGAIN):
		n, werr = 0, nil
	}
	if werr != nil || n >= len(f) {
		sr.mu.Unlock()
		if werr != nil {
			return 0, werr
		}
		return len(f), nil
	}
	return max(n, 0), nil
}

// finish sends rest, what tryFrame could not, waiting for room, and
// unlocks sr.
func (sr *socketConn) finish(rest []byte) error {
	defer sr.mu.Unlock()
	_, err := sr.send(rest)
	return err
}

// send writes p, behind the pending 101 if it was not sent yet (sr.mu held).
func (sr *socketConn) send(p []byte) (int, error) {
	if sr.pending == nil {
		return sr.Conn.Write(p)
	}
	// One write(2) for both: a copy of two short messages costs less than
	// a second syscall (Conn is wrapped, so net.Buffers would not writev).
	head := len(sr.pending)
	b := append(sr.pending, p...)
	sr.pending = nil
	n, err := sr.Conn.Write(b)
	return max(n-head, 0), err
}

// pongFrame is the reply to every pusher:ping.
var pongFrame = frameOf(protocol.Pong)

// pingFrame asks a resumable page to acknowledge what it got (replay.go).
var pingFrame = frameOf([]byte(`{"event":"pusher:ping","data":"{}"}`))
