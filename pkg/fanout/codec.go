package fanout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The wire format of one message, the payload of a Redis pub/sub message:
//
//	version byte (1), then event, data, user_id, except_socket, except_user,
//	each as a uvarint length followed by that many bytes, then, unless it
//	is 0 and no serial follows, the message's Version as a uvarint (added
//	later: absent reads as 0), then, on a channel with a history, the
//	serial as a uvarint length and its bytes, which the history's publish
//	script appends (package history; absent reads as "").
//
// The channel is not carried: the Redis topic names it. A length prefix
// instead of JSON because Data is itself JSON, which JSON would escape
// (every quote doubled into \") and which decoding would unescape again;
// BenchmarkCodec measures the difference. Later versions may append fields:
// readers ignore bytes after the fields they know, so a rolling upgrade
// that only adds fields keeps the version byte.
const wireVersion byte = 1

var (
	errEmptyPayload = errors.New("empty payload")
	errTruncated    = errors.New("truncated payload")
	errNoEvent      = errors.New("no event name")
)

// encode returns m's wire form (m.Channel and m.Serial excluded). With a
// history rule (m.Keep) it ends with Version even when 0, so the serial
// the script appends is read as the serial.
func encode(m *Message) []byte {
	fields := [...]string{m.Event, m.Data, m.UserID, m.ExceptSocket, m.ExceptUser}
	n := 1 + uvarintLen(uint64(max(m.Version, 0)))
	for _, f := range fields {
		n += uvarintLen(uint64(len(f))) + len(f)
	}
	b := make([]byte, 1, n)
	b[0] = wireVersion
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	if m.Version > 0 || m.Keep.Events > 0 {
		b = binary.AppendUvarint(b, uint64(max(m.Version, 0)))
	}
	return b
}

// decode parses a wire payload. The strings it returns share p's memory, so
// decoding allocates nothing beyond the Message.
func decode(p string) (Message, error) {
	var m Message
	if len(p) == 0 {
		return m, errEmptyPayload
	}
	if p[0] != wireVersion {
		return m, fmt.Errorf("unknown wire version %d", p[0])
	}
	p = p[1:]
	for _, f := range [...]*string{&m.Event, &m.Data, &m.UserID, &m.ExceptSocket, &m.ExceptUser} {
		n, k := uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) { //nolint:gosec // G115: k > 0 is checked first and uvarint never reads past p, so len(p)-k >= 0
			return Message{}, errTruncated
		}
		p = p[k:]
		*f, p = p[:n], p[n:]
	}
	if m.Event == "" {
		return Message{}, errNoEvent
	}
	if len(p) > 0 {
		v, k := uvarint(p)
		if k <= 0 || v > math.MaxInt64 {
			return Message{}, errTruncated
		}
		m.Version = int64(v)
		p = p[k:]
	}
	if len(p) > 0 {
		n, k := uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) { //nolint:gosec // G115: as above
			return Message{}, errTruncated
		}
		m.Serial = p[k : k+int(n)] //nolint:gosec // G115: n <= len(p)-k, checked above
	}
	return m, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// uvarint is binary.Uvarint over a string, so decoding does not copy the
// payload into a []byte first. It returns k <= 0 on truncation or overflow.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -1
			}
			return x | uint64(c)<<shift, i + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, 0
}
