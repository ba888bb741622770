package protocol

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"sync/atomic"
)

// SocketIDs issues socket ids "<prefix>.<n>": a random 15-digit prefix per
// generator (one per process) and a counter. pusher-http-go and -node
// reject ids not matching ^\d+\.\d+$. Two processes collide only if they
// draw the same prefix: about 1 in 10^8 for 10^4 process starts.
type SocketIDs struct {
	prefix []byte // "<digits>."
	n      atomic.Uint64
}

// NewSocketIDs returns a generator with a fresh random prefix.
func NewSocketIDs() *SocketIDs {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	const lo, span = 100_000_000_000_000, 900_000_000_000_000
	p := lo + binary.BigEndian.Uint64(b[:])%span
	return &SocketIDs{prefix: append(strconv.AppendUint(nil, p, 10), '.')}
}

// Next returns a new socket id. It is safe for concurrent use.
func (g *SocketIDs) Next() string {
	var buf [48]byte
	b := append(buf[:0], g.prefix...)
	b = strconv.AppendUint(b, g.n.Add(1), 10)
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
