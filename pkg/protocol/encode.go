package protocol

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Pong is the pre-encoded answer to pusher:ping. It is shared: do not modify.
var Pong = []byte(`{"event":"pusher:pong","data":"{}"}`)

// Message is a server-to-client frame.
type Message struct {
	Event string
	// Channel is omitted when empty.
	Channel string
	// Data is the event's data as the client will see it after JSON.parse
	// (usually JSON text); it is sent as a JSON-encoded string and omitted
	// when empty.
	Data string
	// UserID is the sender of a client event on a presence channel; omitted
	// when empty.
	UserID string
}

// AppendTo appends the encoded frame to dst.
func (m Message) AppendTo(dst []byte) []byte {
	return appendFrame(dst, m.Event, m.Channel, m.Data, m.UserID)
}

// AppendConnectionEstablished appends pusher:connection_established with
// the socket id and activity timeout (seconds, must be > 0 for pusher-js).
func AppendConnectionEstablished(dst []byte, socketID string, activityTimeout int) []byte {
	dst = append(dst, `{"event":"pusher:connection_established","data":"{\"socket_id\":`...)
	// The inner string is escaped twice: once as a value of the inner JSON,
	// once as part of the outer string.
	var scratch [64]byte
	dst = append(dst, `\"`...)
	dst = appendStringBody(dst, appendStringBody(scratch[:0], socketID))
	dst = append(dst, `\",\"activity_timeout\":`...)
	dst = strconv.AppendInt(dst, int64(activityTimeout), 10)
	return append(dst, `}"}`...)
}

// AppendSubscriptionSucceeded appends pusher_internal:subscription_succeeded
// for a non-presence channel (data "{}").
func AppendSubscriptionSucceeded(dst []byte, channel string) []byte {
	dst = append(dst, `{"event":"pusher_internal:subscription_succeeded","channel":`...)
	dst = appendString(dst, channel)
	return append(dst, `,"data":"{}"}`...)
}

// AppendError appends pusher:error with code (null for CodeNone) and message.
func AppendError(dst []byte, code Code, message string) []byte {
	var scratch [256]byte
	inner := append(scratch[:0], `{"code":`...)
	if code == CodeNone {
		inner = append(inner, "null"...)
	} else {
		inner = strconv.AppendInt(inner, int64(code), 10)
	}
	inner = append(inner, `,"message":`...)
	inner = appendString(inner, message)
	inner = append(inner, '}')
	return appendFrame(dst, EventError, "", inner, "")
}

// appendFrame writes the envelope with data (JSON text) as a JSON string.
func appendFrame[D string | []byte](dst []byte, event, channel string, data D, userID string) []byte {
	dst = append(dst, `{"event":`...)
	dst = appendString(dst, event)
	if channel != "" {
		dst = append(dst, `,"channel":`...)
		dst = appendString(dst, channel)
	}
	if len(data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = appendString(dst, data)
	}
	if userID != "" {
		dst = append(dst, `,"user_id":`...)
		dst = appendString(dst, userID)
	}
	return append(dst, '}')
}

func appendString[S string | []byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	dst = appendStringBody(dst, s)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendStringBody appends s escaped for the inside of a JSON string.
// Invalid UTF-8 becomes U+FFFD, as encoding/json does; U+2028 and U+2029
// are escaped so the frame is also safe to embed in JavaScript source.
func appendStringBody[S string | []byte](dst []byte, s S) []byte {
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// AppendSigninSuccess appends pusher:signin_success whose data is
// {"user_data":"<userData exactly as signed>"}, as pusher-js expects.
func AppendSigninSuccess(dst []byte, userData string) []byte {
	inner := make([]byte, 0, len(userData)+32)
	inner = append(inner, `{"user_data":`...)
	inner = appendString(inner, userData)
	inner = append(inner, '}')
	return appendFrame(dst, EventSigninSuccess, "", inner, "")
}

// AppendPresenceSucceeded appends pusher_internal:subscription_succeeded
// for a presence channel: data {"presence":{"ids":[..],"hash":{..},"count":N}}
// with ids in the given order. A nil user_info is sent as null.
func AppendPresenceSucceeded(dst []byte, channel string, ids []string, info map[string]json.RawMessage) []byte {
	inner := make([]byte, 0, 64+32*len(ids))
	inner = append(inner, `{"presence":{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			inner = append(inner, ',')
		}
		inner = appendString(inner, id)
	}
	inner = append(inner, `],"hash":{`...)
	for i, id := range ids {
		if i > 0 {
			inner = append(inner, ',')
		}
		inner = appendString(inner, id)
		inner = append(inner, ':')
		inner = appendRaw(inner, info[id])
	}
	inner = append(inner, `},"count":`...)
	inner = strconv.AppendInt(inner, int64(len(ids)), 10)
	inner = append(inner, `}}`...)
	return appendFrame(dst, EventSubscriptionSucceeded, channel, inner, "")
}

// MemberAddedData is the data of pusher_internal:member_added.
func MemberAddedData(userID string, userInfo json.RawMessage) string {
	b := make([]byte, 0, len(userID)+len(userInfo)+32)
	b = append(b, `{"user_id":`...)
	b = appendString(b, userID)
	b = append(b, `,"user_info":`...)
	b = appendRaw(b, userInfo)
	return string(append(b, '}'))
}

// MemberRemovedData is the data of pusher_internal:member_removed.
func MemberRemovedData(userID string) string {
	b := make([]byte, 0, len(userID)+16)
	b = append(b, `{"user_id":`...)
	b = appendString(b, userID)
	return string(append(b, '}'))
}

// SubscriptionCountData is the data of pusher_internal:subscription_count.
func SubscriptionCountData(n int64) string {
	return `{"subscription_count":` + strconv.FormatInt(n, 10) + `}`
}

// appendRaw appends raw JSON, or null when it is empty or not valid JSON
// (so a bad stored value cannot break the frame around it).
func appendRaw(dst []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 || !json.Valid(raw) {
		return append(dst, "null"...)
	}
	return append(dst, raw...)
}

// AppendWatchlistEvents appends pusher_internal:watchlist_events (no
// channel) whose data is {"events":[{"name":"online","user_ids":[..]},
// {"name":"offline","user_ids":[..]}]}, as pusher-js's watchlist
// dispatches it: one event per non-empty list, online first.
func AppendWatchlistEvents(dst []byte, online, offline []string) []byte {
	inner := make([]byte, 0, 64+24*(len(online)+len(offline)))
	inner = append(inner, `{"events":[`...)
	first := true
	for _, ev := range []struct {
		name string
		ids  []string
	}{{WatchlistOnline, online}, {WatchlistOffline, offline}} {
		if len(ev.ids) == 0 {
			continue
		}
		if !first {
			inner = append(inner, ',')
		}
		first = false
		inner = append(inner, `{"name":`...)
		inner = appendString(inner, ev.name)
		inner = append(inner, `,"user_ids":[`...)
		for i, id := range ev.ids {
			if i > 0 {
				inner = append(inner, ',')
			}
			inner = appendString(inner, id)
		}
		inner = append(inner, "]}"...)
	}
	inner = append(inner, "]}"...)
	return appendFrame(dst, EventWatchlistEvents, "", inner, "")
}
