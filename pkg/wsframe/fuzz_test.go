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
	var out []byte
	var kinds []Kind
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
			if n < 0 || n > len(in) {
				t.Fatalf("Next consumed %d of %d bytes", n, len(in))
			}
			in = in[n:]
			if ev.Kind == None {
				if len(in) != 0 && d.flags&fDone == 0 {
					t.Fatalf("None with %d bytes left", len(in))
				}
				break
			}
			kinds = append(kinds, ev.Kind)
			var done bool
			if out, done = react(&d, ev, out); done {
				return out, kinds
			}
		}
		between := d.flags&(fFrame|fMsg) == 0 && d.pend == 0
		if between != d.Idle() || between && d.buf != nil {
			t.Fatalf("between messages %v, Idle %v, buffer of %d bytes", between, d.Idle(), cap(d.buf))
		}
		if limit >= 0 && int64(len(d.buf)-int(d.pend)) > limit {
			t.Fatalf("holds %d bytes of a message over the limit %d", len(d.buf), limit)
		}
	}
	if ev := d.EOF(); ev.Kind == Message {
		kinds = append(kinds, Message)
		out = AppendFrame(out, ev.Op, ev.Payload)
	}
	if !d.Idle() || d.buf != nil {
		t.Fatal("an ended Decoder holds a buffer")
	}
	return out, kinds
}

func fuzzSeeds(f *testing.F) {
	for _, c := range streamCases() {
		f.Add(c.stream, uint8(c.limit), uint64(0))
	}
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
	f.Fuzz(func(t *testing.T, stream []byte, limit uint8, _ uint64) {
		if len(stream) > 4096 {
			return
		}
		got := askCoder(t, stream, int64(limit))
		out, _ := checkedServe(t, stream, nil, int64(limit))
		if string(got) != string(out) {
			t.Fatalf("coder/websocket sent %q, the Decoder's events %q", got, out)
		}
	})
}
