package protocol

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
)

// NewSocketID returns a new socket id "<a>.<b>": two numbers of 53 bits
// each from crypto/rand, the form pusher-http-go, -node and -php insist on
// (^\d+\.\d+$), each part a safe integer for a client that parses it as a
// JavaScript number. No id tells anything of another: a client that could
// guess a neighbour's id could, through a backend that forwards
// X-Socket-ID (Laravel's toOthers), keep a broadcast from that socket.
// With 106 random bits, a billion ids repeat one with a chance below
// 10^-13. It is safe for concurrent use.
func NewSocketID() string {
	var r [16]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails on supported platforms
	const mask = 1<<53 - 1
	var buf [40]byte
	b := strconv.AppendUint(buf[:0], binary.LittleEndian.Uint64(r[:8])&mask, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, binary.LittleEndian.Uint64(r[8:])&mask, 10)
	return string(b)
}

// ValidSocketID reports whether s matches ^\d+\.\d+$, the form every
// Pusher server library insists on.
func ValidSocketID(s string) bool {
	dot := -1
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && dot < 0:
			dot = i
		default:
			return false
		}
	}
	return dot > 0 && dot < len(s)-1
}
