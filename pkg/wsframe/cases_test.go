package wsframe

import (
	"strings"
)

// A misbehaviour (or good behaviour) case: a client byte stream and what
// coder/websocket's server sends back, read from its source.
type streamCase struct {
	name   string
	stream []byte
	limit  int64
	want   []byte
	// parts: the node answers node instead, on purpose (the package doc
	// says where and why); want is still what coder sends.
	parts bool
	node  []byte
}

const (
	subscribe  = `{"event":"pusher:subscribe","data":{"channel":"x"}}`
	pusherPing = `{"event":"pusher:ping","data":{}}`
	clientEv   = `{"event":"client-typing","channel":"private-x","data":{"a":1}}`
)

func echo(op Opcode, s string) []byte { return AppendFrame(nil, op, []byte(s)) }
func closeF(code StatusCode, reason string) []byte {
	return AppendClose(nil, code, reason)
}

func unmasked(b0 byte, p string) []byte {
	return frame{b0: b0, lenForm: -1, payload: []byte(p)}.bytes()
}

func streamCases() []streamCase {
	long := func(n int) string { return strings.Repeat("x", n) }
	cs := []streamCase{
		{name: "subscribe", stream: cf(finText, subscribe), want: echo(OpText, subscribe)},
		{name: "pusher ping and client event", stream: cat(cf(finText, pusherPing), cf(finText, clientEv)),
			limit: 100, want: cat(echo(OpText, pusherPing), echo(OpText, clientEv))},
		{name: "binary", stream: cf(finBinary, "\x00\xff"), want: echo(OpBinary, "\x00\xff")},
		{name: "empty text", stream: cf(finText, ""), want: echo(OpText, "")},
		{name: "fragmented", stream: cat(cf(text, "ab"), cf(cont, "cd"), cf(finCont, "ef")), want: echo(OpText, "abcdef")},
		{name: "fragmented binary empty fragments", stream: cat(cf(binFrag, ""), cf(cont, "x"), cf(cont, ""), cf(finCont, "")),
			want: echo(OpBinary, "x")},
		{name: "ping between fragments", stream: cat(cf(text, "ab"), cf(finPing, "p1"), cf(finCont, "cd")),
			want: cat(echo(OpPong, "p1"), echo(OpText, "abcd"))},
		{name: "pong between fragments", stream: cat(cf(text, "ab"), cf(finPong, "p1"), cf(finCont, "cd")),
			want: echo(OpText, "abcd")},
		{name: "close between fragments", stream: cat(cf(text, "ab"), cf(finClose, closePayload(1000, "bye")), cf(finCont, "cd")),
			want: closeF(1000, "bye")},
		{name: "ping with payload", stream: cf(finPing, "hello"), want: echo(OpPong, "hello")},
		{name: "empty ping", stream: cf(finPing, ""), want: echo(OpPong, "")},
		{name: "ping of 125 bytes", stream: cf(finPing, long(125)), want: echo(OpPong, long(125))},
		{name: "pong", stream: cat(cf(finPong, "x"), cf(finText, "a")), want: echo(OpText, "a")},
		{name: "rsv1", stream: cf(0xc1, "a"), want: closeF(1002, "received header with unexpected rsv bits set: true:false:false")},
		{name: "rsv2", stream: cf(0xa1, "a"), want: closeF(1002, "received header with unexpected rsv bits set: false:true:false")},
		{name: "rsv3 on ping", stream: cf(0x99, "a"), want: closeF(1002, "received header with unexpected rsv bits set: false:false:true")},
		{name: "rsv on continuation", stream: cat(cf(text, "a"), cf(0xf0, "b")),
			want: closeF(1002, "received header with unexpected rsv bits set: true:true:true")},
		{name: "unmasked", stream: cat(cf(finText, "a"), unmasked(finText, "b")), want: echo(OpText, "a"),
			parts: true, node: cat(echo(OpText, "a"), closeF(1002, "received unmasked frame from client"))},
		{name: "unmasked ping", stream: unmasked(finPing, "b"), parts: true, node: closeF(1002, "received unmasked frame from client")},
		{name: "unmasked with rsv", stream: unmasked(0xc1, "b"), want: closeF(1002, "received header with unexpected rsv bits set: true:false:false")},
		{name: "unknown opcode 3", stream: cf(0x83, "a"), want: closeF(1002, "received unknown opcode opcode(3)")},
		{name: "unknown opcode 11", stream: cf(0x8b, "a"), want: closeF(1002, "received unknown opcode opcode(11)")},
		{name: "unknown opcode in fragment", stream: cat(cf(text, "a"), cf(0x07, "a")), want: closeF(1002, "received unknown opcode opcode(7)")},
		{name: "control frame of 126 bytes", stream: cf(finPing, long(126)),
			want: closeF(1002, "received control frame payload with invalid length: 126")},
		{name: "close frame of 126 bytes", stream: cf(finClose, closePayload(1000, long(124))),
			want: closeF(1002, "received control frame payload with invalid length: 126")},
		{name: "fragmented ping", stream: cf(0x09, "a"), want: closeF(1002, "received fragmented control frame")},
		{name: "continuation first", stream: cf(finCont, "a"), want: closeF(1002, "received continuation frame without text or binary frame")},
		{name: "text inside message", stream: cat(cf(text, "a"), cf(finText, "b")),
			want: closeF(1002, "received new data message without finishing the previous message")},
		{name: "at the limit", stream: cf(finText, long(64)), want: echo(OpText, long(64))},
		{name: "over the limit", stream: cf(finText, long(65)), want: closeF(1009, "read limited at 65 bytes")},
		{name: "over the limit in fragments", stream: cat(cf(text, long(40)), cf(finPing, "p"), cf(finCont, long(25))),
			want: cat(echo(OpPong, "p"), closeF(1009, "read limited at 65 bytes"))},
		{name: "limit reached at a fragment's end", stream: cat(cf(text, long(65)), cf(0x83, "")),
			want: closeF(1009, "read limited at 65 bytes")},
		{name: "at the limit in fragments", stream: cat(cf(text, long(64)), cf(finPing, "p"), cf(cont, ""), cf(finCont, "")),
			want: cat(echo(OpPong, "p"), echo(OpText, long(64)))},
		{name: "huge length, limit+1 bytes sent", stream: frame{b0: finText, masked: true, key: testKey, rawLen: 1 << 40, payload: []byte(long(65))}.bytes(),
			want: closeF(1009, "read limited at 65 bytes")},
		{name: "huge length, few bytes then EOF", stream: frame{b0: finText, masked: true, key: testKey, rawLen: 1 << 40, payload: []byte(long(10))}.bytes(),
			parts: true, node: closeF(1009, "read limited at 65 bytes")},
		{name: "2^62 bytes claimed, header only", stream: frame{b0: finBinary, masked: true, key: testKey, rawLen: 1 << 62}.bytes(),
			want: echo(OpBinary, ""), parts: true, node: closeF(1009, "read limited at 65 bytes")},
		{name: "fragment claims past the limit", stream: cat(cf(text, long(40)), frame{b0: cont, masked: true, key: testKey, rawLen: 25}.bytes()),
			want: echo(OpText, long(40)), parts: true, node: closeF(1009, "read limited at 65 bytes")},
		{name: "limit zero", limit: 0, stream: cat(cf(finText, ""), cf(finText, "a")), want: cat(echo(OpText, ""), closeF(1009, "read limited at 1 bytes"))},
		{name: "16-bit length", limit: 1000, stream: cf(finText, long(300)), want: echo(OpText, long(300))},
		{name: "64-bit length", limit: 1 << 17, stream: cf(finBinary, long(70000)), want: echo(OpBinary, long(70000))},
		{name: "non-minimal lengths", stream: cat(frame{b0: finText, masked: true, key: testKey, lenForm: 126, payload: []byte("ab")}.bytes(),
			frame{b0: finPing, masked: true, key: testKey, lenForm: 127, payload: []byte("cd")}.bytes()),
			want: cat(echo(OpText, "ab"), echo(OpPong, "cd"))},
		{name: "negative length", stream: frame{b0: finText, masked: true, key: testKey, rawLen: 1 << 63, payload: []byte("a")}.bytes()},
		{name: "close one byte", stream: cf(finClose, "\x03"),
			want: closeF(1002, `received invalid close payload: close payload "\x03" too small, cannot even contain the 2 byte status code`)},
		{name: "close empty", stream: cat(cf(finClose, ""), cf(finText, "a")), want: closeF(1005, "")},
		{name: "close reason not UTF-8", stream: cf(finClose, closePayload(1000, "\xff\xfe")), want: closeF(1000, "\xff\xfe"),
			parts: true, node: closeF(1007, "received invalid close payload: the reason is not UTF-8")},
		{name: "close reason UTF-8", stream: cf(finClose, closePayload(1000, "é ✓")), want: closeF(1000, "é ✓")},
		{name: "close reason of 123 bytes", stream: cf(finClose, closePayload(4000, long(123))), want: closeF(4000, long(123))},
		{name: "EOF in a header", stream: cat(cf(finText, "a"), cf(finText, "b")[:3]), want: echo(OpText, "a")},
		{name: "EOF in a payload", stream: cat(cf(finText, "a"), cf(finText, "bcd")[:8]), want: echo(OpText, "a")},
		// coder takes the end of the stream at a read boundary inside a
		// message for the message's end.
		{name: "EOF between fragments", stream: cat(cf(text, "a"), cf(finPing, "x"), cf(cont, "b")),
			want: cat(echo(OpPong, "x"), echo(OpText, "ab"))},
		{name: "EOF after a header", stream: cf(finText, "abc")[:6], want: echo(OpText, "")},
		{name: "EOF after a fragment's header", stream: cat(cf(binFrag, "a"), cf(finCont, "bc")[:6]), want: echo(OpBinary, "a")},
		{name: "EOF after a header's first byte", stream: cat(cf(text, "a"), cf(finCont, "bc")[:1]), want: echo(OpText, "a")},
		{name: "EOF after a header's second byte", stream: cat(cf(text, "a"), cf(finCont, "bc")[:2]), want: echo(OpText, "a")},
		{name: "EOF after a 16-bit length", stream: cat(cf(text, "a"), cf(finCont, long(200))[:4]), limit: 1000, want: echo(OpText, "a")},
		{name: "EOF inside a 16-bit length", stream: cat(cf(text, "a"), cf(finCont, long(200))[:3]), limit: 1000},
		{name: "EOF after a 64-bit length", stream: cat(cf(text, "a"), cf(finCont, long(70000))[:10]), limit: 1 << 20, want: echo(OpText, "a")},
		{name: "EOF inside a masking key", stream: cat(cf(text, "a"), cf(finCont, "bc")[:4])},
		{name: "EOF inside a fragment", stream: cat(cf(text, "a"), cf(finCont, "bcd")[:7])},
		{name: "EOF before a ping's payload in a message", stream: cat(cf(text, "a"), cf(finPing, "xy")[:6]), want: echo(OpText, "a")},
		{name: "EOF inside a ping's payload in a message", stream: cat(cf(text, "a"), cf(finPing, "xy")[:7])},
		{name: "EOF before a ping's payload", stream: cf(finPing, "xy")[:6]},
		{name: "EOF after an empty fragment", stream: cat(cf(text, ""), cf(cont, "")), want: echo(OpText, "")},
		{name: "EOF in a ping", stream: cf(finPing, "abc")[:7]},
	}
	for _, c := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4200, 4999} {
		cs = append(cs, streamCase{name: "close " + StatusCode(c).String(), stream: cf(finClose, closePayload(c, "r")), want: closeF(StatusCode(c), "r")})
	}
	for _, c := range []uint16{0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535} {
		cs = append(cs, streamCase{name: "close " + StatusCode(c).String(), stream: cf(finClose, closePayload(c, "r")),
			want: closeF(1002, "received invalid close payload: invalid status code "+StatusCode(c).String())})
	}
	for i := range cs {
		if cs[i].limit == 0 && !strings.HasPrefix(cs[i].name, "limit zero") {
			cs[i].limit = 64
		}
	}
	return cs
}
