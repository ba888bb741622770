package wsframe

import (
	"math/rand/v2"
	"testing"
)

// checkedServe is serve with the Decoder's memory checked after each read:
// between messages, with no partial frame, it holds no buffer.
func checkedServe(t *testing.T, stream []byte, chunks []int, limit int64) ([]byte, []Kind) {
	t.Helper()
	var d Decoder
	check := func(in []byte, ev Event, n int) {
		if n < 0 || n > len(in) {
			t.Fatalf("Next consumed %d of %d bytes", n, len(in))
		}
		if ev.Kind == None && n != len(in) && d.flags&fDone == 0 {
			t.Fatalf("None with %d bytes left", len(in)-n)
		}
	}
	afterRead := func() {
		between := d.flags&(fFrame|fMsg) == 0 && d.pend == 0
		if between != d.Idle() || between && d.buf != nil {
			t.Fatalf("between messages %v, Idle %v, buffer of %d bytes", between, d.Idle(), cap(d.buf))
		}
		if limit >= 0 && int64(len(d.buf)-int(d.pend)) > limit {
			t.Fatalf("holds %d bytes of a message over the limit %d", len(d.buf), limit)
		}
	}
	out, kinds := decodeToEOF(&d, stream, chunks, limit, check, afterRead)
	if !d.Idle() || d.buf != nil {
		t.Fatal("an ended Decoder holds a buffer")
	}
	return out, kinds
}

func fuzzSeeds(f *testing.F) {
	for _, c := range streamCases() {
		f.Add(c.stream, uint8(c.limit), uint64(0))
	}
	f.Add([]byte("\x00\x05abcdhello\x02\x03abcdxyz\x05\x02abcdpq\x03\x04abcdlast"), uint8(64), uint64(1))
	f.Add([]byte("\x07\x02abcdzz\x06\x01abcdp\x01"), uint8(10), uint64(1))
	// What pusher-js and Laravel Echo send, in one stream.
	f.Add(cat(cf(finText, subscribe),
		cf(finText, `{"event":"pusher:subscribe","data":{"auth":"k:sig","channel_data":"{\"user_id\":\"1\"}","channel":"presence-room"}}`),
		cf(finText, pusherPing), cf(finText, clientEv),
		cf(finText, `{"event":"pusher:unsubscribe","data":{"channel":"x"}}`),
		cf(finClose, closePayload(1000, ""))), uint8(200), uint64(7))
	// The server closes first (wsnode refusing a client), then the
	// client's frames are skipped until its close frame.
	f.Add(cat(cf(finText, "close:x"), cf(finText, "a"), cf(text, "b"), cf(finPing, "p")), uint8(64), uint64(8))
	f.Add(cat(cf(finText, "close:x"), cf(finCont, "a"), cf(finClose, closePayload(1000, ""))), uint8(64), uint64(9))
}

// FuzzDecoder: any bytes in any chunking: no panic, the same events and
// replies whatever the chunking, no buffer between messages, never more
// of a message held than the limit.
func FuzzDecoder(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, stream []byte, limit uint8, seed uint64) {
		lim := int64(limit)
		if limit == 255 {
			lim = -1
		}
		if seed&1 == 1 {
			stream = framesFrom(stream)
		}
		want, wantKinds := checkedServe(t, stream, nil, lim)
		r := rand.New(rand.NewPCG(seed, seed>>1))
		for _, ch := range chunkings(r, len(stream)) {
			got, kinds := checkedServe(t, stream, ch, lim)
			if string(got) != string(want) || len(kinds) != len(wantKinds) {
				t.Fatalf("chunks %v: got %q (%v), whole: %q (%v)", ch, got, kinds, want, wantKinds)
			}
		}
	})
}

// FuzzAgainstCoder: what coder/websocket's server sends back for any
// stream, the Decoder's events make. Limits stay under 512 bytes, the
// buffer io.ReadAll starts with: over it, where a stream that ends in the
// middle of a payload is taken for a message's end depends on how coder's
// reader happens to be called (see Decoder.EOF).
func FuzzAgainstCoder(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, stream []byte, limit uint8, seed uint64) {
		if seed&1 == 1 {
			stream = framesFrom(stream)
		}
		if len(stream) > 4096 {
			return
		}
		if partsFromCoder(stream, int64(limit)) {
			return // on purpose: TestAgainstCoder's cases pin what the node sends
		}
		got := askCoder(t, stream, int64(limit))
		out, _ := checkedServe(t, stream, nil, int64(limit))
		if string(got) != string(out) {
			t.Fatalf("coder/websocket sent %q, the Decoder's events %q", got, out)
		}
	})
}

// frameOps are the first bytes framesFrom picks from: mostly frames a
// client may send, some it may not.
var frameOps = [16]byte{finText, text, cont, finCont, finBinary, finPing, finPong, finClose,
	finText, cont, finCont, finPing, 0x09, 0x83, 0xc1, 0x8b}

// framesFrom reads data as a list of frames, so that the fuzzer explores
// streams of well-formed headers: per frame a byte choosing the opcode and
// the length form, a length byte (its top bit clear: unmasked), then the
// masking key and payload from data. A last byte cut short ends the stream
// mid-frame.
func framesFrom(data []byte) []byte {
	var out []byte
	for len(data) >= 2 {
		d0, d1 := data[0], data[1]
		data = data[2:]
		fr := frame{b0: frameOps[d0&15], masked: d1&0x80 == 0 || d0&0x30 != 0x30, lenForm: []int{-1, -1, 126, 127}[d0>>6]}
		copy(fr.key[:], data)
		data = data[min(4, len(data)):]
		n := min(int(d1&0x7f), len(data))
		if d0&0x30 == 0x20 {
			n = min(n*3, len(data)) // longer payloads, past the limits
		}
		fr.payload, data = data[:n], data[n:]
		if fr.b0 == finClose && n == 2 {
			fr.payload = []byte(closePayload(uint16(d1)*20, "")) // codes 0-5100 in steps
		}
		out = append(out, fr.bytes()...)
	}
	if len(data) == 1 && len(out) > 0 {
		out = out[:len(out)-int(data[0])%min(len(out), 8)]
	}
	return out
}
