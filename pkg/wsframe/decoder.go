package wsframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Kind is what an Event reports.
type Kind uint8

// The kinds of Event.
const (
	// None: the input is used up; any partial frame is kept.
	None Kind = iota
	// Message: a whole text or binary message.
	Message
	// Ping: a ping; answer it with a pong (Event.Reply).
	Ping
	// Pong: a pong; coder/websocket ignores one it did not ask for.
	Pong
	// Close: the client's close frame; echo it (Event.Reply) and close.
	Close
	// Fail: the client broke the protocol; send Event.Reply and close.
	Fail
	// Budget: NextN's budget of frames is used up and the next frame
	// starts at in[n:], not consumed.
	Budget
)

// Event is what Decoder.Next found.
type Event struct {
	Kind Kind
	// Op is a Message's opcode: OpText or OpBinary.
	Op Opcode
	// Payload is a Message's whole payload, a Ping's or Pong's, or a
	// Close's reason. It may alias Next's input and is valid until the
	// next call.
	Payload []byte
	// Code is a Close's status code (1005 when the client sent none), or
	// the code a Fail closes with (1006: with no close frame).
	Code StatusCode
	// Err says why a Fail; its text is the reason of the close frame.
	Err error
	// quiet: the server sent its close frame already, so Reply is empty.
	quiet bool
}

// Decoder decodes the frames a client sends on one connection. Its zero
// value is ready; an idle Decoder holds no buffer. It is not safe for
// concurrent use.
type Decoder struct {
	// buf holds the message in progress, then pend bytes of a partial
	// header or control frame payload.
	buf []byte
	// rem is how many payload bytes of the current frame are still to come.
	rem int64
	// key is the current frame's masking key, rotated to its next byte.
	key   uint32
	pend  uint8
	op    Opcode // the current frame's opcode
	flags uint16
}

const (
	fFrame   = 1 << iota // a header was read; rem payload bytes follow
	fFin                 // the current frame is the last of its message
	fMsg                 // a fragmented message is in progress
	fBinary              // the message in progress is binary
	fDropCtl             // the last event's payload is buf's pend bytes
	fDropMsg             // the last event's payload is buf
	fDone                // a Close or Fail ended the connection
	fRead                // a payload byte of the current data frame was read
	fSent                // the server sent its close frame (SentClose)
)

// Idle reports whether d is between messages with no partial frame: it
// then holds no buffer. Call it after Next returned None.
func (d *Decoder) Idle() bool { return d.buf == nil && d.flags&(fFrame|fMsg|fDropCtl|fDropMsg) == 0 }

// Reset drops d's buffers and state, as for a new connection.
func (d *Decoder) Reset() { *d = Decoder{} }

// SentClose tells d that the server sent its close frame, as
// coder/websocket's Conn.Close does before it waits for the client's:
// from then on, as coder's waitCloseHandshake, data frames are skipped
// (no Message, no read limit, no check of their order), the message in
// progress is dropped, and no event gets a Reply. A ping ends the
// connection (a Fail with code 1006): coder cannot send its pong. A
// client close frame or a Fail ends it too.
func (d *Decoder) SentClose() {
	d.drop()
	if d.flags&fDone != 0 {
		return
	}
	d.flags |= fSent
	d.flags &^= fMsg
	pend := d.buf[len(d.buf)-int(d.pend):]
	if len(pend) == 0 {
		d.buf = nil
	} else {
		d.buf = append(d.buf[:0], pend...)
	}
}

// Next decodes the next event from in, whose bytes it may unmask in place,
// and returns it with how many bytes of in it consumed. Call it again with
// in[n:] until it returns an event of kind None: it then consumed all of
// in, keeping a partial frame or message. limit is the read limit of a
// message in bytes (negative: none), as coder/websocket's SetReadLimit.
// After a Close or a Fail, Next returns None and consumes nothing.
func (d *Decoder) Next(in []byte, limit int64) (Event, int) {
	ev, n, _ := d.NextN(in, limit, -1)
	return ev, n
}

// NextN is Next that starts at most budget frames (negative: no bound)
// and also returns how many it started: a frame counts once its header is
// whole, whatever its kind (data, control, an empty continuation). With
// the budget used up it stops where the next frame starts and returns
// Budget, so the caller can keep in[n:] and go on later, after SentClose,
// say. So a client's frames can be counted before any of them is acted on.
func (d *Decoder) NextN(in []byte, limit int64, budget int) (Event, int, int) {
	sent := d.flags&fSent != 0
	ev, n, frames := d.next(in, limit, budget)
	if sent && ev.Kind != None && ev.Kind != Budget {
		ev = d.quiet(ev)
	}
	return ev, n, frames
}

func (d *Decoder) next(in []byte, limit int64, budget int) (Event, int, int) {
	d.drop()
	n, frames := 0, 0
	for d.flags&fDone == 0 {
		if d.flags&fFrame == 0 {
			if d.pend == 0 && n < len(in) && budget >= 0 && frames >= budget {
				return Event{Kind: Budget}, n, frames
			}
			ev, used, ok := d.header(in[n:], limit)
			n += used
			if !ok {
				return ev, n, frames
			}
			frames++
			if ev.Kind != None {
				return ev, n, frames
			}
		}
		ev, used := d.payload(in[n:], limit)
		n += used
		if ev.Kind != None || n == len(in) && d.flags&fFrame != 0 {
			return ev, n, frames
		}
	}
	return Event{}, n, frames
}

// quiet turns ev, decoded after SentClose, into what coder does then.
func (d *Decoder) quiet(ev Event) Event {
	ev.quiet = true
	if ev.Kind == Ping {
		d.end()
		return Event{Kind: Fail, Code: StatusAbnormalClosure, Err: errPingAfterClose, quiet: true}
	}
	return ev
}

// drop lets go of the last event's payload.
func (d *Decoder) drop() {
	if d.flags&(fDropCtl|fDropMsg) != 0 {
		if d.flags&fDropMsg != 0 {
			d.buf = nil
		} else {
			d.buf = d.buf[:len(d.buf)-int(d.pend)]
			d.pend = 0
			if len(d.buf) == 0 {
				d.buf = nil
			}
		}
		d.flags &^= fDropCtl | fDropMsg
	}
}

// EOF returns what coder/websocket's reader returns when the client's
// stream ends where d stands, and ends d. That is None but in one case: a
// message was started and the stream ends where coder's next read of the
// connection reads nothing (between frames; after a header's first or
// second byte, its extended length; before the first payload byte of a
// data frame, or of a control frame between fragments). coder then takes
// the end of the stream for the end of the message (read.go, msgReader.Read
// turns io.EOF into the message's end) and returns the part received as a
// whole Message. Where the stream ends inside a data frame's payload after
// some of it, coder does the same only when its reader's buffer happened
// to end there; EOF returns None then.
func (d *Decoder) EOF() Event {
	d.drop()
	defer d.end()
	if d.flags&fDone != 0 {
		return Event{}
	}
	started, atRead := d.flags&fMsg != 0, false
	switch {
	case d.flags&fSent != 0:
	case d.flags&fFrame == 0:
		p := d.buf[len(d.buf)-int(d.pend):]
		switch len(p) {
		case 0, 1, 2:
			atRead = true
		case 4:
			atRead = p[1]&0x7f == 126
		case 10:
			atRead = p[1]&0x7f == 127
		}
	case d.op >= OpClose:
		atRead = d.pend == 0 && d.rem > 0
	default:
		started, atRead = true, d.flags&fRead == 0
	}
	if !started || !atRead {
		return Event{}
	}
	if d.pend > 0 && d.flags&fFrame == 0 {
		d.buf = d.buf[:len(d.buf)-int(d.pend)]
	}
	return Event{Kind: Message, Op: d.msgOp(), Payload: d.buf}
}

// headerLen is how many bytes the header h starts holds, or 0 when h is
// too short to tell. The whole header is awaited, its masking key
// included, before it is checked: a length with its top bit set too, as
// wsnode's goroutine transport reads whole headers before coder/websocket
// sees them (coder alone refuses that length before the key).
func headerLen(h []byte) int {
	if len(h) < 2 {
		return 0
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// header reads a frame header from in, or what in holds of it. It returns
// ok with the bytes used once the header is whole and checked (with a Fail
// if it breaks the protocol), else the event to return and the bytes used.
func (d *Decoder) header(in []byte, limit int64) (Event, int, bool) {
	var h []byte
	used := 0
	if d.pend == 0 {
		need := headerLen(in)
		if need == 0 || need > len(in) {
			// Keep the start of the header.
			if len(in) == 0 {
				return Event{}, 0, false
			}
			d.buf = append(d.buf, in...)
			d.pend = uint8(len(in)) //nolint:gosec // G115: in is shorter than a header, at most 14 bytes
			return Event{}, len(in), false
		}
		h, used = in[:need], need
	} else {
		for {
			p := d.buf[len(d.buf)-int(d.pend):]
			need := headerLen(p)
			if need == 0 {
				need = 2
			}
			if need == len(p) {
				var hb [14]byte
				h = hb[:copy(hb[:], p)]
				d.buf = d.buf[:len(d.buf)-int(d.pend)]
				d.pend = 0
				if len(d.buf) == 0 {
					d.buf = nil
				}
				break
			}
			if used == len(in) {
				return Event{}, used, false
			}
			d.buf = append(d.buf, in[used])
			d.pend++
			used++
		}
	}
	return d.parseHeader(h, limit), used, true
}

// parseHeader checks the whole header h as coder/websocket does, in its
// order, and makes it the current frame; then, where the node parts from
// coder (see the package doc), whether the data frame's length takes its
// message past limit.
func (d *Decoder) parseHeader(h []byte, limit int64) Event {
	fin, rsv, op, masked := h[0]&0x80 != 0, h[0]&0x70, Opcode(h[0]&0x0f), h[1]&0x80 != 0
	length := int64(h[1] & 0x7f)
	switch length {
	case 126:
		length = int64(binary.BigEndian.Uint16(h[2:]))
	case 127:
		length = int64(binary.BigEndian.Uint64(h[2:])) //nolint:gosec // G115: a length over int64 turns negative and is refused below, as coder does
		if length < 0 {
			return d.fail(StatusAbnormalClosure, fmt.Errorf("received negative payload length: %v", length))
		}
	}
	if rsv != 0 {
		return d.fail(StatusProtocolError, fmt.Errorf("received header with unexpected rsv bits set: %v:%v:%v",
			rsv&0x40 != 0, rsv&0x20 != 0, rsv&0x10 != 0))
	}
	if !masked {
		return d.fail(StatusProtocolError, errUnmasked)
	}
	switch op {
	case OpClose, OpPing, OpPong:
		if length > maxControlPayload {
			return d.fail(StatusProtocolError, fmt.Errorf("received control frame payload with invalid length: %d", length))
		}
		if !fin {
			return d.fail(StatusProtocolError, errFragmentedControl)
		}
	case OpContinuation:
		if d.flags&(fMsg|fSent) == 0 {
			return d.fail(StatusProtocolError, errContinuation)
		}
	case OpText, OpBinary:
		if d.flags&fMsg != 0 {
			return d.fail(StatusProtocolError, errUnfinished)
		}
	default:
		return d.fail(StatusProtocolError, fmt.Errorf("received unknown opcode %v", op))
	}
	if op < OpClose && limit >= 0 && d.flags&fSent == 0 {
		// Refused on the length it claims: waiting for bytes that can only
		// be refused would let a client hold the socket open with nothing.
		// The message so far is buf (a continuation's message is in one).
		if length > limit-int64(len(d.buf)) {
			return d.fail(StatusMessageTooBig, fmt.Errorf("read limited at %d bytes", limit+1))
		}
	}
	d.op, d.rem = op, length
	d.key = binary.LittleEndian.Uint32(h[len(h)-4:])
	d.flags |= fFrame
	d.flags &^= fFin | fRead
	if fin {
		d.flags |= fFin
	}
	switch op {
	case OpBinary:
		d.flags |= fBinary
	case OpText:
		d.flags &^= fBinary
	}
	return Event{}
}

// ErrUnmasked fails a client frame without a mask (RFC 6455 5.1), with 1002.
var ErrUnmasked = errUnmasked

// coder/websocket's reasons, sent in its close frames.
var (
	errUnmasked          = errors.New("received unmasked frame from client")
	errFragmentedControl = errors.New("received fragmented control frame")
	errContinuation      = errors.New("received continuation frame without text or binary frame")
	errUnfinished        = errors.New("received new data message without finishing the previous message")
	errPingAfterClose    = errors.New("received a ping after the close frame was sent: no pong can follow it")
	errCloseReason       = errors.New("received invalid close payload: the reason is not UTF-8")
)

func (d *Decoder) fail(code StatusCode, err error) Event {
	d.end()
	return Event{Kind: Fail, Code: code, Err: err}
}

// end drops d's buffers: the connection is over.
func (d *Decoder) end() {
	*d = Decoder{flags: fDone}
}

// payload reads the current frame's payload from in and returns the
// event it completes, if any, and the bytes used.
func (d *Decoder) payload(in []byte, limit int64) (Event, int) {
	if d.op >= OpClose {
		return d.control(in)
	}
	k := int64(len(in))
	if k > d.rem {
		k = d.rem
	}
	if d.flags&fSent != 0 {
		// coder skips the payload, byte by byte.
		d.rem -= k
		if d.rem == 0 {
			d.flags &^= fFrame
		}
		return Event{}, int(k)
	}
	fin := d.flags&fFin != 0
	if k == d.rem && fin && d.flags&fMsg == 0 && d.buf == nil {
		// The whole message is in in: unmask it there.
		p := in[:k]
		mask(p, d.key)
		d.flags &^= fFrame
		return Event{Kind: Message, Op: d.msgOp(), Payload: p}, int(k)
	}
	if k == 0 && d.rem > 0 {
		return Event{}, 0
	}
	if k > 0 {
		d.flags |= fRead
	}
	if d.buf == nil {
		c := k
		if fin && limit >= 0 && d.rem <= limit {
			c = d.rem // the whole message, within the limit
		}
		d.buf = make([]byte, 0, c)
	}
	start := len(d.buf)
	d.buf = append(d.buf, in[:k]...)
	d.key = mask(d.buf[start:], d.key)
	d.rem -= k
	d.flags |= fMsg
	if d.rem > 0 {
		return Event{}, int(k)
	}
	d.flags &^= fFrame
	if !fin {
		return Event{}, int(k)
	}
	d.flags &^= fMsg
	d.flags |= fDropMsg
	return Event{Kind: Message, Op: d.msgOp(), Payload: d.buf}, int(k)
}

func (d *Decoder) msgOp() Opcode {
	if d.flags&fBinary != 0 {
		return OpBinary
	}
	return OpText
}

// control reads a control frame's payload: from in alone when in holds it
// all, else kept in buf's pend bytes until it is whole.
func (d *Decoder) control(in []byte) (Event, int) {
	var p []byte
	used := 0
	if d.pend == 0 && int64(len(in)) >= d.rem {
		p, used = in[:d.rem], int(d.rem)
		mask(p, d.key)
	} else {
		k := min(int64(len(in)), d.rem)
		start := len(d.buf)
		d.buf = append(d.buf, in[:k]...)
		d.key = mask(d.buf[start:], d.key)
		d.pend += uint8(k) //nolint:gosec // G115: k <= rem <= 125
		d.rem -= k
		used = int(k)
		if d.rem > 0 {
			return Event{}, used
		}
		p = d.buf[len(d.buf)-int(d.pend):]
		d.flags |= fDropCtl
	}
	d.flags &^= fFrame
	switch d.op {
	case OpPing:
		return Event{Kind: Ping, Payload: p}, used
	case OpPong:
		return Event{Kind: Pong, Payload: p}, used
	}
	ev := closeEvent(p)
	d.end()
	return ev, used
}

// CloseEvent is what Next returns for a client close frame whose
// unmasked payload is p: a Close, or a Fail when p breaks the protocol.
func CloseEvent(p []byte) Event { return closeEvent(p) }

// closeEvent parses a close frame's payload as coder/websocket does, and
// checks its reason is UTF-8 as coder does not.
func closeEvent(p []byte) Event {
	if len(p) == 0 {
		return Event{Kind: Close, Code: StatusNoStatusRcvd}
	}
	if len(p) < 2 {
		return Event{Kind: Fail, Code: StatusProtocolError, Err: fmt.Errorf(
			"received invalid close payload: close payload %q too small, cannot even contain the 2 byte status code", p)}
	}
	code := StatusCode(binary.BigEndian.Uint16(p))
	if !validWireCloseCode(code) {
		return Event{Kind: Fail, Code: StatusProtocolError, Err: fmt.Errorf(
			"received invalid close payload: invalid status code %v", code)}
	}
	if !utf8.Valid(p[2:]) {
		// RFC 6455 5.5.1: the reason is UTF-8; echoed, it would be
		// invalid in turn (coder echoes it).
		return Event{Kind: Fail, Code: StatusInvalidFramePayloadData, Err: errCloseReason}
	}
	return Event{Kind: Close, Code: code, Payload: p[2:]}
}
