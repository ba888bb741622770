package protocol_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/headcount/headcount/pkg/protocol"
)

func FuzzDecode(f *testing.F) {
	for _, s := range pusherJSFrames {
		f.Add([]byte(s))
	}
	for _, s := range []string{``, `{}`, `null`, `{"event":"pusher:subscribe","data":"\"x\""}`, `{"event":"e","data":"null"}`, "{\"event\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := protocol.Decode(b)
		if err != nil {
			var perr *protocol.Error
			if !errors.As(err, &perr) {
				t.Fatalf("Decode error %T is not *protocol.Error", err)
			}
			return
		}
		if fr.Event == "" {
			t.Fatal("decoded a frame without event")
		}
		if s, err := fr.Subscribe(); err == nil && s.Channel == "" {
			t.Fatal("subscribe without channel accepted")
		}
		if ch, err := fr.Unsubscribe(); err == nil && ch == "" {
			t.Fatal("unsubscribe without channel accepted")
		}
		if si, err := fr.Signin(); err == nil && (si.Auth == "" || si.UserData == "") {
			t.Fatal("signin without auth or user_data accepted")
		}
		// Relayed client-event data is re-encoded as a JSON string.
		if b := (protocol.Message{Event: "client-x", Data: fr.EventData()}).AppendTo(nil); !json.Valid(b) {
			t.Fatalf("relayed data of %q does not encode: %q", b, fr.Data)
		}
		var v any
		_ = fr.DecodeData(&v)
		// Whatever was decoded re-encodes as valid JSON.
		out := protocol.Message{Event: fr.Event, Channel: fr.Channel, Data: string(fr.Data), UserID: fr.UserID}.AppendTo(nil)
		if !json.Valid(out) {
			t.Fatalf("re-encoded frame is not JSON: %q", out)
		}
	})
}

func FuzzValidateChannelName(f *testing.F) {
	for _, s := range []string{"my-channel", "private-foobar", "presence-foobar", "private-encrypted-x", "#server-to-user-12345",
		"#server-to-user-", "", "a b", "cache-x", "private-cache-x", "private-encrypted-cache-x", "presence-cache-x", "cache-private-x", "ünïcode", "x=@,.;_-", strings.Repeat("a", 201)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		kind := protocol.ChannelKind(name)
		// A cache channel is its base kind with "cache-" after the prefix.
		if protocol.IsCacheChannel(name) {
			base := ""
			for _, p := range []string{"private-encrypted-", "private-", "presence-"} {
				if strings.HasPrefix(name, p+"cache-") {
					base = p
					break
				}
			}
			if want := protocol.ChannelKind(base + "x"); kind != want {
				t.Fatalf("cache channel %q is %v, its base kind is %v", name, kind, want)
			}
		}
		if protocol.ValidateChannelNameMax(name, protocol.MaxChannelNameLength) != nil {
			return
		}
		if name == "" || len(name) > protocol.MaxChannelNameLength {
			t.Fatalf("accepted %q of length %d", name, len(name))
		}
		rest := strings.TrimPrefix(name, protocol.UserChannelPrefix)
		for _, r := range rest {
			if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_=@,.;", r) {
				t.Fatalf("accepted %q with %q", name, r)
			}
		}
		// Valid names need no escaping: the hot path relies on it being cheap.
		got := string(protocol.AppendSubscriptionSucceeded(nil, name))
		if !strings.Contains(got, `"channel":"`+name+`"`) {
			t.Fatalf("valid name %q was escaped: %s", name, got)
		}
	})
}

func FuzzEncodeString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\", "\x00\x1f\x7f", "\xff", "é\u2028", "{\"a\":1}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := protocol.Message{Event: s, Data: s}.AppendTo(nil)
		var got struct{ Event, Data string }
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encoded as invalid JSON %q: %v", s, b, err)
		}
		want := s
		if !utf8.ValidString(s) {
			want = string([]rune(s)) // each invalid byte becomes U+FFFD, as in encoding/json
		}
		if got.Event != want || (s != "" && got.Data != want) {
			t.Fatalf("round trip of %q gave %q", s, got.Event)
		}
		e := protocol.AppendError(nil, protocol.CodeNone, s)
		if !json.Valid(e) {
			t.Fatalf("error frame for %q is invalid JSON", s)
		}
	})
}

// FuzzParseMember covers presence channel_data and signin user_data, which
// come straight from clients (signed, but by the app's auth endpoint from
// whatever the page sent).
func FuzzParseMember(f *testing.F) {
	for _, s := range []string{`{"user_id":10,"user_info":{"name":"Mr. Channels"}}`, `{"user_id":"7"}`, `{"user_id":-1.5e3}`,
		`{"user_id":true}`, `{"user_id":""}`, `{"id":"12345"}`, `{"id":"7","user_info":{"a":[1,2]},"watchlist":["1"]}`, `{"id":"7","watchlist":["1",2,"1"]}`, `{"watchlist":[null]}`, `{"id":7}`, `[]`, `null`, `{"user_id":"\u0000"}`,
		`{"user_id":1e0}`, `{"user_id":-0.0}`, `{"user_id":10E-1}`, `{"user_id":1e256}`, `{"user_id":1e-300}`, `{"user_id":12345678901234567890}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, parse := range []func(string) (protocol.Member, error){protocol.ParseChannelData, protocol.ParseUserData} {
			m, err := parse(s)
			if err != nil {
				var perr *protocol.Error
				if !errors.As(err, &perr) {
					t.Fatalf("error %T is not *protocol.Error", err)
				}
				continue
			}
			if m.UserID == "" {
				t.Fatalf("%q: accepted an empty user id", s)
			}
			if m.UserInfo != nil && !json.Valid(m.UserInfo) {
				t.Fatalf("%q: user_info %q is not JSON", s, m.UserInfo)
			}
			// Whatever was accepted encodes into valid frames.
			for _, b := range [][]byte{
				protocol.AppendPresenceSucceeded(nil, "presence-x", []string{m.UserID}, map[string]json.RawMessage{m.UserID: m.UserInfo}),
				protocol.Message{Event: "e", Data: protocol.MemberAddedData(m.UserID, m.UserInfo)}.AppendTo(nil),
				protocol.AppendSigninSuccess(nil, s),
			} {
				if !json.Valid(b) {
					t.Fatalf("%q: invalid frame %q", s, b)
				}
			}
		}
		// A numeric user_id's spelling is canonical: spelled again, it is
		// the same user.
		if m, err := protocol.ParseChannelData(s); err == nil && isNumericID(s) {
			if again, err := protocol.ParseChannelData(`{"user_id":` + m.UserID + `}`); err != nil || again.UserID != m.UserID {
				t.Fatalf("%q: user id %q reads back as %q (%v)", s, m.UserID, again.UserID, err)
			}
		}
		// The watchlist of signin user_data: distinct non-empty ids whose
		// frame is valid JSON, or a *protocol.Error.
		ids, err := protocol.ParseWatchlist(s)
		if err != nil {
			var perr *protocol.Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %T is not *protocol.Error", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if id == "" || seen[id] {
				t.Fatalf("%q: watchlist %q has an empty or repeated id", s, ids)
			}
			seen[id] = true
		}
		if b := protocol.AppendWatchlistEvents(nil, ids, ids); !json.Valid(b) {
			t.Fatalf("%q: invalid frame %q", s, b)
		}
	})
}

// isNumericID reports whether s's user_id is a JSON number.
func isNumericID(s string) bool {
	var d struct {
		UserID json.RawMessage `json:"user_id"`
	}
	return json.Unmarshal([]byte(s), &d) == nil && len(d.UserID) > 0 && d.UserID[0] != '"'
}
