package protocol

import (
	"bytes"
	"encoding/json"
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
	s := Subscribe{Channel: d.Channel, Auth: d.Auth}
	if cd := bytes.TrimSpace(d.ChannelData); len(cd) > 0 && string(cd) != "null" {
		// pusher-js sends a string; a client sending an object gets its
		// raw text, which is what it would have had to sign.
		if cd[0] != '"' || json.Unmarshal(cd, &s.ChannelData) != nil {
			s.ChannelData = string(cd)
		}
	}
	return s, nil
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
