package wsframe

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

func TestDecoderCases(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range streamCases() {
		t.Run(c.name, func(t *testing.T) {
			for _, ch := range chunkings(r, len(c.stream)) {
				out, _, idle := serve(c.stream, ch, c.limit)
				want := c.want
				if c.parts {
					want = c.node
				}
				require.Equal(t, string(want), string(out), "chunks %v", ch)
				_ = idle
			}
		})
	}
}

// TestDecoderSize holds doc.go's "40 bytes" (on 64-bit platforms): a
// change of the struct must change the claim too.
func TestDecoderSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the size is stated for 64-bit platforms")
	}
	require.Equal(t, uintptr(40), unsafe.Sizeof(Decoder{}))
}

// TestNextNStopsAtItsBudget: NextN counts every frame it starts, empty
// continuations and control frames too, and with its budget used up
// stops before the next frame, which decodes later as it would have.
func TestNextNStopsAtItsBudget(t *testing.T) {
	frames := [][]byte{cf(text, "a"), cf(cont, ""), cf(finPing, "p"), cf(cont, ""), cf(finCont, "b")}
	stream := cat(frames...)
	for budget := range len(frames) + 1 {
		var d Decoder
		in := append([]byte(nil), stream...)
		used, pongs := 0, 0
		var msg string
		for len(in) > 0 {
			ev, n, k := d.NextN(in, 64, budget-used)
			used += k
			in = in[n:]
			switch ev.Kind {
			case Ping:
				pongs++
			case Message:
				msg = string(ev.Payload)
			case Budget:
				require.Equal(t, budget, used)
				require.Equal(t, len(cat(frames[budget:]...)), len(in), "stopped before frame %d", budget)
				ev, n, k = d.NextN(in, 64, -1) // the rest, as the caller would after its close
				used += k
				in = in[n:]
			}
			require.NotEqual(t, Fail, ev.Kind)
		}
		require.Equal(t, len(frames), used, "budget %d", budget)
		if budget == len(frames) {
			require.Equal(t, 1, pongs)
			require.Equal(t, "ab", msg)
		}
	}
}

// TestZeroCopy: a whole frame in the input comes back aliasing it.
func TestZeroCopy(t *testing.T) {
	in := cf(finText, subscribe)
	var d Decoder
	ev, n := d.Next(in, 1024)
	require.Equal(t, Message, ev.Kind)
	require.Equal(t, len(in), n)
	require.Equal(t, subscribe, string(ev.Payload))
	require.Same(t, &in[6], &ev.Payload[0])
	require.True(t, d.Idle())
	require.Nil(t, d.buf)

	ping := cf(finPing, "abc")
	ev, _ = d.Next(ping, 1024)
	require.Equal(t, Ping, ev.Kind)
	require.Same(t, &ping[6], &ev.Payload[0])
}

// TestIdleHoldsNoBuffer: after a split frame or a fragmented message ends,
// the Decoder lets go of its buffer.
func TestIdleHoldsNoBuffer(t *testing.T) {
	stream := cat(cf(text, "ab"), cf(finPing, "p"), cf(finCont, "cd"), cf(finText, subscribe))
	var d Decoder
	for i := range stream {
		in := []byte{stream[i]}
		for {
			ev, n := d.Next(in, 1024)
			in = in[n:]
			if ev.Kind == None {
				break
			}
		}
		if i == len(stream)-1 || i == len(cf(text, "ab"))+len(cf(finPing, "p"))+len(cf(finCont, "cd"))-1 {
			require.True(t, d.Idle(), "after byte %d", i)
			require.Nil(t, d.buf)
		} else {
			require.False(t, d.Idle(), "after byte %d", i)
		}
	}
}

func TestDoneDecoder(t *testing.T) {
	var d Decoder
	ev, _ := d.Next(cf(finClose, closePayload(1000, "")), 10)
	require.Equal(t, Close, ev.Kind)
	ev, n := d.Next(cf(finText, "a"), 10)
	require.Equal(t, None, ev.Kind)
	require.Zero(t, n)
	require.True(t, d.Idle())
	d.Reset()
	ev, _ = d.Next(cf(finText, "a"), 10)
	require.Equal(t, Message, ev.Kind)
}

func TestMask(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 80 {
		for split := range n + 1 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			key := r.Uint32()
			want := bytes.Clone(b)
			for i := range want {
				want[i] ^= byte(key >> (8 * (i % 4)))
			}
			k := mask(b[:split], key)
			mask(b[split:], k)
			require.Equal(t, want, b, "n %d split %d", n, split)
		}
	}
}

func TestAppendClose(t *testing.T) {
	require.Equal(t, []byte{0x88, 0}, AppendClose(nil, 1005, "ignored"))
	require.Equal(t, []byte{0x88, 2, 0x03, 0xf3}, AppendClose(nil, 1006, "x"))
	require.Equal(t, []byte{0x88, 2, 0x03, 0xf3}, AppendClose(nil, 4000, string(make([]byte, 124))))
	require.Equal(t, []byte{0x88, 4, 0x0f, 0xa0, 'o', 'k'}, AppendClose(nil, 4000, "ok"))
	require.Equal(t, []byte{0x81, 126, 0, 200}, AppendFrame(nil, OpText, make([]byte, 200))[:4])
	require.Equal(t, []byte{0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0}, AppendFrame(nil, OpBinary, make([]byte, 65536))[:10])
}

func BenchmarkDecode(b *testing.B) {
	frame := cf(finText, `{"event":"pusher:subscribe","data":{"channel":"presence-x"}}`)
	buf := make([]byte, len(frame))
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var d Decoder
	for b.Loop() {
		copy(buf, frame)
		ev, _ := d.Next(buf, 1<<16)
		if ev.Kind != Message {
			b.Fatal(ev.Kind)
		}
	}
}

func benchMask(b *testing.B, f func([]byte, uint32) uint32, n int) {
	buf := make([]byte, n)
	b.SetBytes(int64(n))
	for b.Loop() {
		f(buf, 0x3d21fa37)
	}
}

func maskBytes(b []byte, key uint32) uint32 {
	for i := range b {
		b[i] ^= byte(key >> (8 * (i & 3)))
	}
	return key
}

func BenchmarkMask(b *testing.B) {
	for _, n := range []int{60, 1024} {
		b.Run("word/"+strconv.Itoa(n), func(b *testing.B) { benchMask(b, mask, n) })
		b.Run("byte/"+strconv.Itoa(n), func(b *testing.B) { benchMask(b, maskBytes, n) })
	}
}
