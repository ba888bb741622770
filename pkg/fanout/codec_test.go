package fanout

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var codecCases = []Message{
	{Event: "e"},
	{Event: "my-event", Data: `{"message":"hello world","n":42}`},
	{Event: "client-typing", Data: `{"typing":true}`, UserID: "user-17", ExceptSocket: "123.456"},
	{Event: "pusher_internal:member_added", Data: `{"user_id":"u","user_info":{"name":"Zoë 👋"}}`, ExceptUser: "u"},
	{Event: "big", Data: strings.Repeat("x", 70000), UserID: strings.Repeat("u", 128)},
	{Event: "nul\x00bytes", Data: "\x00\x01\xff"},
	{Event: "pusher_internal:subscription_count", Data: `{"subscription_count":2}`, Version: 1795470135710257},
	{Event: "v1", Version: 1},
	{Event: "chat", Data: "hi", Serial: "1795470135710-0"},
	{Event: "client-typing", UserID: "u", Version: 7, Serial: "18446744073709551615-18446744073709551615"},
}

// wire is m's payload as subscribers receive it: encode's, then, for a
// message with a Serial, the serial the history's publish script appends.
func wire(m Message) string {
	if m.Serial != "" {
		m.Keep.Events = 1
	}
	p := encode(&m)
	if m.Serial != "" {
		p = binary.AppendUvarint(p, uint64(len(m.Serial)))
		p = append(p, m.Serial...)
	}
	return string(p)
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	for _, m := range codecCases {
		got, err := decode(wire(m))
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
}

// oldDecode is decode as nodes before serials run it (the version byte,
// five strings, then Version if anything follows, the rest ignored):
// frozen here so the rolling upgrade stays tested.
func oldDecode(p string) (Message, error) {
	var m Message
	if len(p) == 0 || p[0] != wireVersion {
		return m, errEmptyPayload
	}
	p = p[1:]
	for _, f := range [...]*string{&m.Event, &m.Data, &m.UserID, &m.ExceptSocket, &m.ExceptUser} {
		n, k := uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) { //nolint:gosec // G115: k > 0 is checked first
			return Message{}, errTruncated
		}
		p = p[k:]
		*f, p = p[:n], p[n:]
	}
	if len(p) > 0 {
		v, k := uvarint(p)
		if k <= 0 || v > math.MaxInt64 {
			return Message{}, errTruncated
		}
		m.Version = int64(v)
	}
	return m, nil
}

// TestCodecSerialOnOldReader: a payload with a serial, Version 0 or not,
// reads on a node that predates serials as the same message without it.
func TestCodecSerialOnOldReader(t *testing.T) {
	t.Parallel()
	for _, m := range codecCases {
		got, err := oldDecode(wire(m))
		require.NoError(t, err)
		m.Serial = ""
		require.Equal(t, m, got)
	}
}

func TestCodecChannelNotCarried(t *testing.T) {
	t.Parallel()
	m := Message{Channel: "presence-room", Event: "e"}
	got, err := decode(string(encode(&m)))
	require.NoError(t, err)
	require.Empty(t, got.Channel, "the topic names the channel")
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	valid := string(encode(&Message{Event: "ev", Data: "data", UserID: "u"}))
	for name, p := range map[string]string{
		"empty":         "",
		"version 0":     "\x00" + valid[1:],
		"version 2":     "\x02" + valid[1:],
		"json":          `{"event":"e"}`,
		"no event":      string(encode(&Message{Data: "d"})),
		"length past":   "\x01\x05ab",
		"huge length":   "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
		"varint overfl": "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
		"varint cut":    "\x01\x80",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decode(p)
			require.Error(t, err)
		})
	}
	for i := 1; i < len(valid); i++ {
		_, err := decode(valid[:i])
		require.Error(t, err, "truncated to %d bytes", i)
	}
	// Fields a later version appends after the serial are ignored.
	m, err := decode(wire(Message{Event: "ev", Data: "data", Serial: "1-0"}) + "\x03new")
	require.NoError(t, err)
	require.Equal(t, "data", m.Data)
	require.Equal(t, "1-0", m.Serial)

	// A message from a node that predates Version reads as unversioned; a
	// Version cut short is an error.
	versioned := string(encode(&Message{Event: "ev", Version: 1 << 40}))
	m, err = decode(versioned[:len(string(encode(&Message{Event: "ev"})))])
	require.NoError(t, err)
	require.Zero(t, m.Version)
	_, err = decode(versioned[:len(versioned)-1])
	require.Error(t, err)
	_, err = decode(string(encode(&Message{Event: "ev"})) + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
	require.Error(t, err, "a Version past int64")

	// A serial cut short is an error.
	serial := wire(Message{Event: "ev", Serial: "1-0"})
	_, err = decode(serial[:len(serial)-1])
	require.Error(t, err)
}

func FuzzDecode(f *testing.F) {
	for _, m := range append(codecCases[:4], codecCases[len(codecCases)-2:]...) {
		f.Add(wire(m))
	}
	f.Add("")
	f.Add("\x01\x80")
	f.Fuzz(func(t *testing.T, p string) {
		m, err := decode(p)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		again, err := decode(wire(m))
		require.NoError(t, err)
		require.Equal(t, m, again)
	})
}

// BenchmarkCodec compares the wire format with JSON of the same Message,
// for a typical event whose data is JSON (encode plus decode).
func BenchmarkCodec(b *testing.B) {
	m := Message{
		Channel: "presence-room-42", Event: "new-message",
		Data:         `{"id":"7f3a","user":{"id":17,"name":"Ann"},"text":"hello \"world\"","sent_at":1718000000}`,
		ExceptSocket: "1234.5678",
	}
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			p := encode(&m)
			size = len(p)
			if _, err := decode(string(p)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size), "bytes")
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			p, err := json.Marshal(&m)
			if err != nil {
				b.Fatal(err)
			}
			size = len(p)
			var got Message
			if err := json.Unmarshal(p, &got); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(size), "bytes")
	})
}
