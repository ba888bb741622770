package wsnode

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"

	"github.com/headcount/headcount/pkg/wsframe"
	"github.com/headcount/headcount/pkg/wsfront"
)

// socketConn is the connection the front (wsfront) hands websocket.Accept
// (hijackSocket): the accepted wsfront.Conn, read through the socket's own
// Read (websocket.Conn's bufio.Reader reads from the net.Conn it is given).
// It exists so that an idle socket costs less:
//
//   - It reads the connection into a pooled chunk that it holds only while
//     the chunk has unread bytes, so an idle socket holds no read buffer:
//     the bufio.Reader in front of it is bufio's minimum, 16 bytes (was
//     512).
//   - It checks each frame's header before websocket.Conn reads it, for
//     the node's rules where coder/websocket falls short (check): the
//     socket's frame budget counts every frame, control frames and empty
//     continuations too, and an unmasked frame, a length past the read
//     limit and a close reason that is not UTF-8 fail the connection as
//     the event loop's wsframe.Decoder does.
//   - It hands out no byte past the end of the frame being read, so the
//     bufio.Reader is empty once a frame is read, and unread tells the
//     socket's goroutine, without a race with websocket.Conn's own readers,
//     whether a next frame is already here. If none is, the goroutine waits
//     for one in waitReadable, a few frames deep, instead of inside
//     websocket.Conn's read path: a parked goroutine then fits the smallest
//     stack, 2 KiB (was 4 KiB).
//
// Read is called only under websocket.Conn's read lock, so one at a time;
// the write side is in wire.go.
type socketConn struct {
	*wsfront.Conn
	// raw reads and writes without waiting (waitReadable, tryFrame); nil
	// if the connection has no descriptor: then the read path waits, and
	// finish writes every frame.
	raw syscall.RawConn
	// chunk[r:w] are the bytes read and not handed out yet; chunk is nil
	// when there are none.
	chunk *[]byte
	r, w  int32
	// unread is w-r, for the socket's goroutine (see waitReadable).
	unread atomic.Int32
	// frameLeft is how many bytes of the frame being handed out are left,
	// its header included; 0 at a frame boundary.
	frameLeft int64
	// s is the socket, whose frame budget check charges; nil until the
	// socket is open. msgLen is the length of the message in progress so
	// far (inMsg), as its headers claim.
	s      *socket
	msgLen int64
	inMsg  bool

	// The write side (wire.go). mu keeps each frame whole on the wire.
	mu sync.Mutex
	// pending is the handshake's 101 response, sent in one write with the
	// first frame (one write(2) fewer per socket).
	pending []byte
	// closeSent is the code of the close frame sent (1005 for one
	// without a code), set under mu, or 0: once set, no data frame may
	// follow it, and the frames read after it are only the close's answer
	// (check lets them by).
	closeSent atomic.Uint32
	// gather holds the pieces of a frame websocket.Conn is writing (Write);
	// only websocket.Conn's writer, one at a time, touches it.
	gather []byte
}

// readChunkSize is one read(2) from a socket: Pusher frames from clients
// are small, and a larger frame is read straight into the caller's buffer.
const readChunkSize = 512

var readChunks = sync.Pool{New: func() any { b := make([]byte, readChunkSize); return &b }}

// hijackSocket is the front's HijackFunc: an upgrade hands websocket.Accept
// a socketConn, which starts with what the client sent behind its head and
// holds the 101 until the first frame, and the smallest buffers.
func hijackSocket(c *wsfront.Conn, early, response []byte) (net.Conn, *bufio.ReadWriter) {
	sr := newSocketConn(c, early, response)
	return sr, bufio.NewReadWriter(newSocketBufio(sr), bufio.NewWriterSize(sr, controlBufferSize))
}

// controlBufferSize is the write buffer websocket.Conn keeps for its own
// control frames: bufio's smallest, since the node's frames bypass it and
// socketConn gathers websocket.Conn's frames whole.
const controlBufferSize = 16

// newSocketConn reads from c, starting with early (what the client sent
// behind its request head, or nil), and writes pending (the 101) with its
// first frame.
func newSocketConn(c *wsfront.Conn, early, pending []byte) *socketConn {
	sr := &socketConn{Conn: c, pending: pending}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		sr.raw, _ = sc.SyscallConn()
	}
	if len(early) > 0 {
		sr.chunk, sr.w = &early, int32(len(early))
		sr.unread.Store(sr.w)
	}
	return sr
}

func (sr *socketConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if sr.chunk == nil && sr.frameLeft >= readChunkSize && len(p) >= readChunkSize {
		// Well inside a large frame: read straight into p.
		n, err := sr.Conn.Read(p[:min(int64(len(p)), sr.frameLeft)])
		sr.frameLeft -= int64(n)
		return n, err
	}
	if sr.frameLeft == 0 {
		// A frame starts here: its header says where it ends.
		if err := sr.fillHeader(); err != nil {
			return 0, err
		}
	} else if sr.chunk == nil {
		if err := sr.fill(); err != nil {
			return 0, err
		}
	}
	b := (*sr.chunk)[sr.r:sr.w]
	n := copy(p, b[:min(int64(len(b)), sr.frameLeft)])
	sr.r += int32(n)
	sr.frameLeft -= int64(n)
	sr.unread.Store(sr.w - sr.r)
	if sr.r == sr.w {
		if len(*sr.chunk) == readChunkSize { // else early bytes, not pooled
			readChunks.Put(sr.chunk)
		}
		sr.chunk, sr.r, sr.w = nil, 0, 0
	}
	return n, nil
}

// fill reads what the connection has into a chunk; sr has no unread bytes.
// A failed read takes no chunk.
func (sr *socketConn) fill() error {
	chunk := readChunks.Get().(*[]byte)
	n, err := sr.Conn.Read(*chunk)
	if n == 0 {
		readChunks.Put(chunk)
		return err
	}
	// A TCP read returns bytes or an error, not both; an error behind
	// bytes would come again with the next read.
	sr.chunk, sr.r, sr.w = chunk, 0, int32(n)
	return nil
}

// fillHeader reads until the unread bytes hold a whole frame header (and
// a close frame's whole payload, for check: at most 14 + 125 bytes, which
// fit a read chunk), checks it, then sets
// frameLeft to the frame's length, header included.
func (sr *socketConn) fillHeader() error {
	for {
		if sr.chunk != nil {
			b := (*sr.chunk)[sr.r:sr.w]
			if n, ok := frameLength(b); ok {
				// Only a close frame check would look into is waited for:
				// coder fails any other at its header, at once.
				if pl := payloadLength(b); b[0] == 0x80|byte(wsframe.OpClose) && b[1]&0x80 != 0 && pl >= 0 && pl <= 125 && int64(len(b)) < n {
					if sr.fillMore() == nil {
						continue
					}
					// The read failed: websocket.Conn meets it in the payload.
				} else if err := sr.check(b, n); err != nil {
					return err
				}
				sr.frameLeft = n
				return nil
			}
		}
		if err := sr.fillMore(); err != nil {
			return err
		}
	}
}

// check applies the node's rules to the frame b starts with, n bytes
// long, before websocket.Conn reads it, in the order wsframe.Decoder
// does: the frame budget first (errFrameRate, nothing consumed: the
// handler answers with overFrameRate and the frame is read again as its
// close's answer), then, where coder/websocket would not, an unmasked
// frame (1002), a data frame taking its message past the read limit
// (1009, on the length claimed) and a close reason that is not UTF-8
// (1007). What coder refuses itself (RSV bits, a length with its top bit
// set, the opcodes and their order, control frame lengths) is left to it.
// Once a close frame was sent, frames pass unchecked, as on the loop.
func (sr *socketConn) check(b []byte, n int64) error {
	if sr.s == nil || sr.closeSent.Load() != 0 {
		return nil
	}
	if !sr.s.allowFrame() {
		return errFrameRate
	}
	fin, op, masked := b[0]&0x80 != 0, wsframe.Opcode(b[0]&0x0f), b[1]&0x80 != 0
	if b[0]&0x70 != 0 || b[1]&0x7f == 127 && b[2]&0x80 != 0 {
		return nil
	}
	if !masked {
		return sr.fail(wsframe.StatusProtocolError, wsframe.ErrUnmasked)
	}
	length := payloadLength(b)
	head := n - length
	limit := sr.s.node.tun.readLimit
	switch op {
	case wsframe.OpClose:
		if !fin || length < 2 || length > 125 || int64(len(b)) < n {
			return nil
		}
		var p [125]byte
		key := b[head-4 : head]
		for i := range length {
			p[i] = b[head+i] ^ key[i&3]
		}
		if ev := wsframe.CloseEvent(p[:length]); ev.Kind == wsframe.Fail && ev.Code == wsframe.StatusInvalidFramePayloadData {
			return sr.fail(ev.Code, ev.Err)
		}
	case wsframe.OpText, wsframe.OpBinary:
		if sr.inMsg {
			return nil // coder refuses it
		}
		sr.msgLen = 0
		fallthrough
	case wsframe.OpContinuation:
		if !sr.inMsg && op == wsframe.OpContinuation {
			return nil // coder refuses it
		}
		if limit >= 0 && length > limit-sr.msgLen {
			err := fmt.Errorf("read limited at %d bytes", limit+1)
			return fmt.Errorf("%w: %w", websocket.ErrMessageTooBig, sr.fail(wsframe.StatusMessageTooBig, err))
		}
		sr.msgLen += length
		sr.inMsg = !fin
	}
	return nil
}

// payloadLength is the payload length the whole header b starts with
// claims (negative if its top bit is set).
func payloadLength(b []byte) int64 {
	switch n := b[1] & 0x7f; n {
	case 126:
		return int64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		return int64(binary.BigEndian.Uint64(b[2:])) //nolint:gosec // G115: a top bit set turns it negative, and callers refuse that
	default:
		return int64(n)
	}
}

// fail sends the close frame coder/websocket would for code and err,
// unless a close frame went out already, and returns err: the read fails
// and the socket's goroutine cuts the connection, as wsnode does when
// coder fails one.
func (sr *socketConn) fail(code wsframe.StatusCode, err error) error {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.closeSent.Load() == 0 {
		sr.closeSent.Store(uint32(code))
		_, _ = sr.send(wsframe.AppendClose(nil, code, err.Error()))
	}
	return err
}

// fillMore reads more behind the unread bytes, which are less than a frame
// header, moving them to the front of a pooled chunk first.
func (sr *socketConn) fillMore() error {
	if sr.chunk == nil {
		return sr.fill()
	}
	chunk := sr.chunk
	if len(*chunk) != readChunkSize { // early bytes: continue in a pooled chunk
		chunk = readChunks.Get().(*[]byte)
	}
	w := int32(copy(*chunk, (*sr.chunk)[sr.r:sr.w]))
	sr.chunk, sr.r, sr.w = chunk, 0, w
	n, err := sr.Conn.Read((*chunk)[w:])
	sr.w += int32(n)
	sr.unread.Store(sr.w)
	if n == 0 {
		return err
	}
	return nil
}

// frameLength is the length of the WebSocket frame that b starts with, its
// header included, and whether b holds all of the header (RFC 6455 5.2).
// A length past what int64 holds is clamped: websocket.Conn refuses it.
func frameLength(b []byte) (int64, bool) {
	if len(b) < 2 {
		return 0, false
	}
	header, payload := 2, uint64(b[1]&0x7f)
	switch payload {
	case 126:
		header += 2
	case 127:
		header += 8
	}
	if b[1]&0x80 != 0 {
		header += 4 // masking key
	}
	if len(b) < header {
		return 0, false
	}
	switch payload {
	case 126:
		payload = uint64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		payload = binary.BigEndian.Uint64(b[2:])
	}
	return int64(min(payload, math.MaxInt64-uint64(header))) + int64(header), true
}

// waitReadable returns once the connection has something to read (a
// frame, its end, an error), or at once if sr holds unread bytes; the
// caller then reads a frame. Called only by the socket's goroutine between
// frames, when the bufio.Reader in front of sr is empty (Read hands out no
// byte past the frame read).
func (sr *socketConn) waitReadable() {
	if sr.raw == nil || sr.unread.Load() > 0 {
		return
	}
	// Errors show again in the frame's read.
	_ = sr.raw.Read(peekReadable)
}

// newSocketBufio is the bufio.Reader websocket.Conn reads sr through:
// bufio's minimum, since sr holds the chunk a read fills. (websocket.Accept
// keeps the buffer and points the reader at the connection Hijack returns,
// which is sr.)
func newSocketBufio(sr *socketConn) *bufio.Reader { return bufio.NewReaderSize(sr, 16) }
