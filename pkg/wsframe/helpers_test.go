package wsframe

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
)

// frame builds a client frame. b0 is the first byte (FIN, RSV, opcode);
// lenForm forces the 7-bit (0), 16-bit (126) or 64-bit (127) length form,
// or picks the shortest (-1). masked frames use key.
type frame struct {
	b0      byte
	masked  bool
	key     [4]byte
	lenForm int
	payload []byte
	// rawLen, when not zero, replaces the length the header claims.
	rawLen uint64
}

func (f frame) bytes() []byte {
	n := uint64(len(f.payload))
	if f.rawLen != 0 {
		n = f.rawLen
	}
	form := f.lenForm
	if form < 0 || form == 0 && n > 125 {
		switch {
		case n > 0xffff:
			form = 127
		case n > 125:
			form = 126
		default:
			form = 0
		}
	}
	b := []byte{f.b0, 0}
	if f.masked {
		b[1] = 0x80
	}
	switch form {
	case 126:
		b[1] |= 126
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	case 127:
		b[1] |= 127
		b = binary.BigEndian.AppendUint64(b, n)
	default:
		b[1] |= byte(n)
	}
	if f.masked {
		b = append(b, f.key[:]...)
	}
	p := append([]byte(nil), f.payload...)
	if f.masked {
		for i := range p {
			p[i] ^= f.key[i%4]
		}
	}
	return append(b, p...)
}

var testKey = [4]byte{0x37, 0xfa, 0x21, 0x3d}

// cf is a masked client frame with the shortest length form.
func cf(b0 byte, payload string) []byte {
	return frame{b0: b0, masked: true, key: testKey, lenForm: -1, payload: []byte(payload)}.bytes()
}

func closePayload(code uint16, reason string) string {
	return string(binary.BigEndian.AppendUint16(nil, code)) + reason
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

const (
	finText   = 0x81
	finBinary = 0x82
	text      = 0x01
	binFrag   = 0x02
	cont      = 0x00
	finCont   = 0x80
	finClose  = 0x88
	finPing   = 0x89
	finPong   = 0x8a
)

// serve runs the stream through a Decoder as wsnode's loop would, read by
// read in the given chunk sizes (the rest in one read), copying each read
// into a fresh buffer as the loop's read buffer, and returns what the
// server sends back: each message echoed, pongs, the final close frame.
// It also returns the events' kinds and whether the decoder ended idle.
func serve(stream []byte, chunks []int, limit int64) (out []byte, kinds []Kind, idle bool) {
	var d Decoder
	out, kinds = decodeToEOF(&d, stream, chunks, limit, nil, nil)
	return out, kinds, d.Idle()
}

// decodeToEOF is decodeReads followed by the stream's end, unless the
// server ended the connection first.
func decodeToEOF(d *Decoder, stream []byte, chunks []int, limit int64, check func(in []byte, ev Event, n int), afterRead func()) ([]byte, []Kind) {
	out, kinds, ended := decodeReads(d, stream, chunks, limit, check, afterRead)
	if ev := d.EOF(); !ended && ev.Kind == Message {
		kinds = append(kinds, Message)
		out = AppendFrame(out, ev.Op, ev.Payload)
	}
	return out, kinds
}

// decodeReads runs stream through d as serve describes and reacts to each
// event; it returns what the server sends, the events' kinds and whether
// the server ended the connection. check, if set, sees each Next's
// answer; afterRead, if set, runs after each read.
func decodeReads(d *Decoder, stream []byte, chunks []int, limit int64, check func(in []byte, ev Event, n int), afterRead func()) (out []byte, kinds []Kind, ended bool) {
	for len(stream) > 0 {
		c := len(stream)
		if len(chunks) > 0 {
			c = min(chunks[0], c)
			chunks = chunks[1:]
		}
		in := append([]byte(nil), stream[:c]...)
		stream = stream[c:]
		for {
			ev, n := d.Next(in, limit)
			if check != nil {
				check(in, ev, n)
			}
			in = in[n:]
			if ev.Kind == None {
				break
			}
			kinds = append(kinds, ev.Kind)
			var done bool
			if out, done = react(d, ev, out); done {
				return out, kinds, true
			}
		}
		if afterRead != nil {
			afterRead()
		}
	}
	return out, kinds, false
}

// chunkings are the ways a test splits a stream into reads.
func chunkings(r *rand.Rand, n int) [][]int {
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	all := [][]int{nil, ones}
	for range 4 {
		var c []int
		for left := n; left > 0; {
			k := 1 + r.IntN(min(left, 40))
			c = append(c, k)
			left -= k
		}
		all = append(all, c)
	}
	return all
}

// react appends to out what the reference server sends for ev and
// reports whether the connection ends: it echoes a message, but answers
// one starting with closeTrigger with Conn.Close(4000, "bye").
func react(d *Decoder, ev Event, out []byte) ([]byte, bool) {
	switch {
	case ev.Kind == Message && bytes.HasPrefix(ev.Payload, closeTrigger):
		d.SentClose()
		return AppendClose(out, 4000, "bye"), false
	case ev.Kind == Message:
		return AppendFrame(out, ev.Op, ev.Payload), false
	case ev.Kind == Close || ev.Kind == Fail:
		return ev.Reply(out), true
	}
	return ev.Reply(out), false
}
