package wsframe

import (
	"bytes"
	"testing"

	"github.com/gobwas/ws"
)

// BenchmarkDecodeGobwas decodes BenchmarkDecode's frame with gobwas/ws, the
// codec of the "million WebSockets in Go" servers and the alternative to
// this package weighed for the event loop: ws.ReadHeader, then ws.Cipher
// on the payload in place. gobwas reads frames from an io.Reader, so a
// loop would still have to hold a frame split across reads itself, as
// Decoder does; this measures the whole-frame case only.
func BenchmarkDecodeGobwas(b *testing.B) {
	frame := cf(finText, `{"event":"pusher:subscribe","data":{"channel":"presence-x"}}`)
	buf := make([]byte, len(frame))
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var r bytes.Reader
	for b.Loop() {
		copy(buf, frame)
		r.Reset(buf)
		h, err := ws.ReadHeader(&r)
		if err != nil || h.OpCode != ws.OpText {
			b.Fatal(err, h.OpCode)
		}
		ws.Cipher(buf[len(buf)-int(h.Length):], h.Mask, 0)
	}
}
