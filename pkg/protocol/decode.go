package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Frame is a decoded client frame: {"event","channel"?,"data"?,"user_id"?}.
type Frame struct {
	Event   string `json:"event"`
	Channel string `json:"channel,omitempty"`
	// Data is the data value exactly as sent: an object (pusher-js), a
	// JSON-encoded string, or empty when absent. Use DecodeData to read it.
	Data   json.RawMessage `json:"data,omitempty"`
	UserID string          `json:"user_id,omitempty"`
}

// Decode parses one client frame. Errors are *Error with CodeNone: the
// client is told, the connection survives.
func Decode(b []byte) (Frame, error) {
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return Frame{}, &Error{Message: "Malformed frame: " + err.Error()}
	}
	if f.Event == "" {
		return Frame{}, &Error{Message: "Malformed frame: no event"}
	}
	return f, nil
}

// DecodeData unmarshals the frame's data into v, whether it was sent as a
// JSON value or as a JSON-encoded string holding one. Errors are *Error.
func (f Frame) DecodeData(v any) error {
	raw := bytes.TrimSpace(f.Data)
	if len(raw) == 0 || string(raw) == "null" {
		return &Error{Message: f.Event + ": no data"}
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return &Error{Message: f.Event + ": malformed data: " + err.Error()}
		}
		raw = []byte(s)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return &Error{Message: f.Event + ": malformed data: " + err.Error()}
	}
	return nil
}

// Subscribe is the data of pusher:subscribe.
type Subscribe struct {
	Channel string
	// Auth is "<key>:<hex signature>"; pusher-js sends "" for public channels.
	Auth string
	// ChannelData is the presence member JSON exactly as received: it is
	// signed byte for byte, so it is never re-serialized.
	ChannelData string
}

// Subscribe decodes the data of a pusher:subscribe frame. Errors are *Error.
func (f Frame) Subscribe() (Subscribe, error) {
	var d struct {
		Channel     string          `json:"channel"`
		Auth        string          `json:"auth"`
		ChannelData json.RawMessage `json:"channel_data"`
	}
	if err := f.DecodeData(&d); err != nil {
		return Subscribe{}, err
	}
	if d.Channel == "" {
		return Subscribe{}, &Error{Message: f.Event + ": data.channel is missing"}
	}
	// pusher-js sends a string; a client sending an object gets its raw
	// text, which is what it would have had to sign.
	return Subscribe{Channel: d.Channel, Auth: d.Auth, ChannelData: rawOrString(d.ChannelData)}, nil
}

// Unsubscribe decodes the channel of a pusher:unsubscribe frame. Errors are *Error.
func (f Frame) Unsubscribe() (string, error) {
	var d struct {
		Channel string `json:"channel"`
	}
	if err := f.DecodeData(&d); err != nil {
		return "", err
	}
	if d.Channel == "" {
		return "", &Error{Message: f.Event + ": data.channel is missing"}
	}
	return d.Channel, nil
}

// Signin is the data of pusher:signin.
type Signin struct {
	// Auth is "<key>:<hex signature>" over "socket_id::user::user_data".
	Auth string
	// UserData is the user JSON exactly as received: it is signed byte for
	// byte, so it is never re-serialized.
	UserData string
}

// Signin decodes the data of a pusher:signin frame. Errors are *Error.
func (f Frame) Signin() (Signin, error) {
	var d struct {
		Auth     string          `json:"auth"`
		UserData json.RawMessage `json:"user_data"`
	}
	if err := f.DecodeData(&d); err != nil {
		return Signin{}, err
	}
	s := Signin{Auth: d.Auth, UserData: rawOrString(d.UserData)}
	if s.UserData == "" {
		return Signin{}, &Error{Message: f.Event + ": data.user_data is missing"}
	}
	if s.Auth == "" {
		return Signin{}, &Error{Message: f.Event + ": data.auth is missing"}
	}
	return s, nil
}

// rawOrString returns a JSON string's value, or the raw text of any other
// value ("" for absent or null): what a client would have had to sign.
func rawOrString(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// EventData returns the frame's data as the text fanned out to other
// clients: a JSON string's value, or the raw JSON of any other value. Client
// events are relayed this way, and subscribers JSON.parse it back.
func (f Frame) EventData() string { return rawOrString(f.Data) }

// Member is a presence channel member: what channel_data and signin
// user_data describe.
type Member struct {
	// UserID is the user id as a string (a JSON number as its plain
	// decimal, see ParseChannelData).
	UserID string
	// UserInfo is the raw user_info JSON, or nil when absent.
	UserInfo json.RawMessage
}

// ParseChannelData parses presence channel_data
// {"user_id": string|number, "user_info"?: any}. A numeric user_id (the
// Pusher docs use 10) becomes its exact value in plain decimal, so "10",
// 10, 1e1 and 10.0 are one user. Errors are *Error.
func ParseChannelData(s string) (Member, error) {
	var d struct {
		UserID   json.RawMessage `json:"user_id"`
		UserInfo json.RawMessage `json:"user_info"`
	}
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return Member{}, &Error{Message: "Malformed channel_data: " + err.Error()}
	}
	id, err := userID(d.UserID)
	if err != nil {
		return Member{}, &Error{Message: "Invalid channel_data: user_id " + err.Error()}
	}
	return Member{UserID: id, UserInfo: compactInfo(d.UserInfo)}, nil
}

// ParseUserData parses signin user_data {"id": string, "user_info"?: any}.
// pusher-js requires id to be a non-empty string; so does this. Errors are
// *Error.
func ParseUserData(s string) (Member, error) {
	var d struct {
		ID       json.RawMessage `json:"id"`
		UserInfo json.RawMessage `json:"user_info"`
	}
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return Member{}, &Error{Message: "Malformed user_data: " + err.Error()}
	}
	var id string
	if len(d.ID) == 0 || d.ID[0] != '"' || json.Unmarshal(d.ID, &id) != nil || id == "" {
		return Member{}, &Error{Message: "Invalid user_data: id must be a non-empty string"}
	}
	return Member{UserID: id, UserInfo: compactInfo(d.UserInfo)}, nil
}

func userID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", errors.New("is missing")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("is malformed: %w", err)
		}
		if s == "" {
			return "", errors.New("is empty")
		}
		return s, nil
	case raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9':
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return "", fmt.Errorf("is malformed: %w", err)
		}
		return plainDecimal(string(n))
	}
	return "", errors.New("must be a string or a number")
}

// maxNumericID bounds the digits of a numeric user id's plain decimal, so
// an exponent cannot make it long; no user id may be longer anyway.
const maxNumericID = 256

// plainDecimal spells the JSON number n as its exact value in plain
// decimal: no exponent, no leading or trailing zeros, no "-0". So 1, 1.0,
// 1e0 and 10E-1 are one user, "1", as pusher-js keys its members (String
// of the number) for every safe integer and short decimal; a larger
// integer keeps all its digits, so two users never become one.
func plainDecimal(n string) (string, error) {
	mant, exp10, _ := strings.Cut(strings.ToLower(n), "e")
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	whole, frac, _ := strings.Cut(mant, ".")
	exp := 0
	if exp10 != "" {
		e, err := strconv.Atoi(strings.TrimPrefix(exp10, "+"))
		if err != nil || e > maxNumericID || e < -maxNumericID {
			return "", errors.New("is a number too long to spell")
		}
		exp = e
	}
	// The value is digits × 10^exp.
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	for strings.HasSuffix(digits, "0") {
		digits, exp = digits[:len(digits)-1], exp+1
	}
	if digits == "" {
		return "0", nil
	}
	var out string
	switch {
	case len(digits)+max(exp, -exp) > maxNumericID:
		return "", errors.New("is a number too long to spell")
	case exp >= 0:
		out = digits + strings.Repeat("0", exp)
	case -exp >= len(digits):
		out = "0." + strings.Repeat("0", -exp-len(digits)) + digits
	default:
		out = digits[:len(digits)+exp] + "." + digits[len(digits)+exp:]
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}

// compactInfo returns user_info compacted (it is embedded in other frames
// and stored), or nil when absent or null.
func compactInfo(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return nil // unreachable: it was decoded as part of valid JSON
	}
	return b.Bytes()
}

// ParseWatchlist returns the distinct user ids of signin user_data's
// "watchlist" array, in their first order (nil when absent or null). Each
// id is a string or a number, as a presence user_id is. It checks no
// limit: the caller does (MaxWatchlist). Errors are *Error.
func ParseWatchlist(s string) ([]string, error) {
	var d struct {
		Watchlist []json.RawMessage `json:"watchlist"`
	}
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return nil, &Error{Message: "Invalid user_data: watchlist must be an array of user ids: " + err.Error()}
	}
	var ids []string
	seen := make(map[string]bool, len(d.Watchlist))
	for i, raw := range d.Watchlist {
		id, err := userID(raw)
		if err != nil {
			return nil, &Error{Message: "Invalid user_data: watchlist entry " + strconv.Itoa(i) + " " + err.Error()}
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}
