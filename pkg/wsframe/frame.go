package wsframe

import (
	"encoding/binary"
	"math/bits"
	"strconv"
)

// Opcode is a frame's opcode (RFC 6455 5.2).
type Opcode uint8

// The opcodes RFC 6455 defines; the others are reserved.
const (
	OpContinuation Opcode = 0
	OpText         Opcode = 1
	OpBinary       Opcode = 2
	OpClose        Opcode = 8
	OpPing         Opcode = 9
	OpPong         Opcode = 10
)

// String names op as coder/websocket's opcode stringer does: its reasons
// quote it ("received unknown opcode opcode(3)").
func (op Opcode) String() string {
	switch op {
	case OpContinuation:
		return "opContinuation"
	case OpText:
		return "opText"
	case OpBinary:
		return "opBinary"
	case OpClose:
		return "opClose"
	case OpPing:
		return "opPing"
	case OpPong:
		return "opPong"
	}
	return "opcode(" + strconv.Itoa(int(op)) + ")"
}

// StatusCode is a close frame's status code (RFC 6455 7.4).
type StatusCode int

// The status codes this package uses.
const (
	StatusNormalClosure   StatusCode = 1000
	StatusProtocolError   StatusCode = 1002
	StatusNoStatusRcvd    StatusCode = 1005
	StatusAbnormalClosure StatusCode = 1006
	// StatusInvalidFramePayloadData is 1007: text (or a close reason)
	// that is not UTF-8.
	StatusInvalidFramePayloadData StatusCode = 1007
	StatusMessageTooBig           StatusCode = 1009
	StatusInternalError           StatusCode = 1011
)

var statusNames = [...]string{
	"StatusNormalClosure", "StatusGoingAway", "StatusProtocolError", "StatusUnsupportedData",
	"statusReserved", "StatusNoStatusRcvd", "StatusAbnormalClosure", "StatusInvalidFramePayloadData",
	"StatusPolicyViolation", "StatusMessageTooBig", "StatusMandatoryExtension", "StatusInternalError",
	"StatusServiceRestart", "StatusTryAgainLater", "StatusBadGateway", "StatusTLSHandshake",
}

// String names c as coder/websocket's StatusCode stringer does: its
// reasons quote it ("invalid status code StatusCode(999)").
func (c StatusCode) String() string {
	if c >= 1000 && int(c-1000) < len(statusNames) {
		return statusNames[c-1000]
	}
	return "StatusCode(" + strconv.Itoa(int(c)) + ")"
}

// validWireCloseCode is coder/websocket's: the codes a close frame may carry.
func validWireCloseCode(c StatusCode) bool {
	switch c {
	case 1004, StatusNoStatusRcvd, StatusAbnormalClosure, 1015:
		return false
	}
	return c >= 1000 && c <= 1014 || c >= 3000 && c <= 4999
}

// maxControlPayload bounds a control frame's payload (RFC 6455 5.5).
const maxControlPayload = 125

// AppendFrame appends a server frame (FIN set, unmasked) of op carrying
// payload to dst.
func AppendFrame(dst []byte, op Opcode, payload []byte) []byte {
	dst = appendHeader(dst, op, len(payload))
	return append(dst, payload...)
}

func appendHeader(dst []byte, op Opcode, n int) []byte {
	b0 := 0x80 | byte(op)
	switch {
	case n > 0xffff:
		dst = append(dst, b0, 127)
		return binary.BigEndian.AppendUint64(dst, uint64(n))
	case n > 125:
		dst = append(dst, b0, 126)
		return binary.BigEndian.AppendUint16(dst, uint16(n))
	}
	return append(dst, b0, byte(n)) //nolint:gosec // G115: n <= 125 here
}

// AppendClose appends the close frame coder/websocket writes for
// Conn.Close(code, reason) to dst: no payload for 1005, and 1011 with no
// reason when code may not be sent or reason is over 123 bytes.
func AppendClose(dst []byte, code StatusCode, reason string) []byte {
	return appendClose(dst, code, reason)
}

func appendClose[S string | []byte](dst []byte, code StatusCode, reason S) []byte {
	if code == StatusNoStatusRcvd {
		return appendHeader(dst, OpClose, 0)
	}
	if len(reason) > maxControlPayload-2 || !validWireCloseCode(code) {
		dst = appendHeader(dst, OpClose, 2)
		return binary.BigEndian.AppendUint16(dst, uint16(StatusInternalError))
	}
	dst = appendHeader(dst, OpClose, 2+len(reason))
	dst = binary.BigEndian.AppendUint16(dst, uint16(code)) //nolint:gosec // G115: a valid wire code is under 5000
	return append(dst, reason...)
}

// Reply appends to dst what coder/websocket's server sends in answer to
// ev, before the connection goes on (Ping) or ends (Close, Fail): a pong
// echoing a ping's payload; a close frame echoing the client's code and
// reason (none for 1005); for a Fail, a close frame with ev.Code and the
// reason ev.Err's text, or nothing when ev.Code is 1006. Message and Pong
// get no answer, and nothing does after Decoder.SentClose.
func (ev *Event) Reply(dst []byte) []byte {
	if ev.quiet {
		return dst
	}
	switch ev.Kind {
	case Ping:
		return AppendFrame(dst, OpPong, ev.Payload)
	case Close:
		return appendClose(dst, ev.Code, ev.Payload)
	case Fail:
		if ev.Code == StatusAbnormalClosure {
			return dst
		}
		return appendClose(dst, ev.Code, ev.Err.Error())
	}
	return dst
}

// mask XORs b with the masking key (RFC 6455 5.3; key holds the key's
// first byte in its low bits) and returns the key rotated to follow b, for
// the next bytes of the same payload. It works a word at a time.
func mask(b []byte, key uint32) uint32 {
	if len(b) >= 8 {
		k := uint64(key)<<32 | uint64(key)
		for len(b) >= 32 {
			binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)^k)
			binary.LittleEndian.PutUint64(b[8:], binary.LittleEndian.Uint64(b[8:])^k)
			binary.LittleEndian.PutUint64(b[16:], binary.LittleEndian.Uint64(b[16:])^k)
			binary.LittleEndian.PutUint64(b[24:], binary.LittleEndian.Uint64(b[24:])^k)
			b = b[32:]
		}
		for len(b) >= 8 {
			binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)^k)
			b = b[8:]
		}
	}
	for i := range b {
		b[i] ^= byte(key >> (8 * (i & 3))) //nolint:gosec // G115: the key's byte i%4, truncation meant
	}
	return bits.RotateLeft32(key, -8*(len(b)&3))
}
