package protocol_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/protocol"
)

// Frames as pusher-js 8 sends them (captured from its protocol.ts encode).
var pusherJSFrames = []string{
	`{"event":"pusher:subscribe","data":{"auth":"","channel":"my-channel"}}`,
	`{"event":"pusher:subscribe","data":{"auth":"278d425bdf160c739803:58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4","channel":"private-foobar"}}`,
	`{"event":"pusher:subscribe","data":{"auth":"278d425bdf160c739803:31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80","channel_data":"{\"user_id\":10,\"user_info\":{\"name\":\"Mr. Channels\"}}","channel":"presence-foobar"}}`,
	`{"event":"pusher:unsubscribe","data":{"channel":"my-channel"}}`,
	`{"event":"pusher:ping","data":{}}`,
	`{"event":"pusher:pong","data":{}}`,
	`{"event":"pusher:signin","data":{"auth":"278d425bdf160c739803:4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba","user_data":"{\"id\":\"12345\"}"}}`,
	`{"event":"client-typing","data":{"user":"x"},"channel":"private-chat"}`,
	// Other clients (pusher-websocket-java, -swift) send data as a string.
	`{"event":"pusher:subscribe","data":"{\"channel\":\"my-channel\",\"auth\":\"\"}"}`,
}

// serverFrame decodes a server frame the way strict SDKs do: data must be a string.
type serverFrame struct {
	Event   string  `json:"event"`
	Channel string  `json:"channel"`
	Data    *string `json:"data"`
	UserID  string  `json:"user_id"`
}

func decodeServer(t *testing.T, b []byte) serverFrame {
	t.Helper()
	var f serverFrame
	require.NoError(t, json.Unmarshal(b, &f), "frame %s", b)
	return f
}

func dataObject(t *testing.T, f serverFrame) map[string]any {
	t.Helper()
	require.NotNil(t, f.Data, "data missing")
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(*f.Data), &m), "data %q is not a JSON object", *f.Data)
	return m
}

func TestDecodePusherJSFrames(t *testing.T) {
	for _, in := range pusherJSFrames {
		f, err := protocol.Decode([]byte(in))
		require.NoError(t, err, in)
		require.NotEmpty(t, f.Event)
	}
}

func TestSubscribeDataObjectOrString(t *testing.T) {
	for _, in := range []string{
		`{"event":"pusher:subscribe","data":{"auth":"k:s","channel":"presence-x","channel_data":"{\"user_id\":10}"}}`,
		`{"event":"pusher:subscribe","data":"{\"auth\":\"k:s\",\"channel\":\"presence-x\",\"channel_data\":\"{\\\"user_id\\\":10}\"}"}`,
	} {
		f, err := protocol.Decode([]byte(in))
		require.NoError(t, err)
		s, err := f.Subscribe()
		require.NoError(t, err, in)
		require.Equal(t, protocol.Subscribe{Channel: "presence-x", Auth: "k:s", ChannelData: `{"user_id":10}`}, s)
	}
}

func TestSubscribeChannelDataObjectKeepsRawText(t *testing.T) {
	f, err := protocol.Decode([]byte(`{"event":"pusher:subscribe","data":{"channel":"presence-x","channel_data":{"user_id":"7"}}}`))
	require.NoError(t, err)
	s, err := f.Subscribe()
	require.NoError(t, err)
	require.Equal(t, `{"user_id":"7"}`, s.ChannelData)
}

func TestDecodeErrors(t *testing.T) {
	for name, in := range map[string]string{
		"not json":       `{"event":`,
		"array":          `[1,2]`,
		"no event":       `{"data":{}}`,
		"null":           `null`,
		"event a number": `{"event":3}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := protocol.Decode([]byte(in))
			var perr *protocol.Error
			require.True(t, errors.As(err, &perr), "error %v is not a *protocol.Error", err)
			require.Equal(t, protocol.CodeNone, perr.Code)
			require.Contains(t, perr.Message, "Malformed frame")
		})
	}
}

func TestSubscribeErrors(t *testing.T) {
	for name, in := range map[string]string{
		"no data":          `{"event":"pusher:subscribe"}`,
		"null data":        `{"event":"pusher:subscribe","data":null}`,
		"no channel":       `{"event":"pusher:subscribe","data":{"auth":""}}`,
		"channel a number": `{"event":"pusher:subscribe","data":{"channel":5}}`,
		"bad string data":  `{"event":"pusher:subscribe","data":"{nope"}`,
		"data an array":    `{"event":"pusher:subscribe","data":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			f, err := protocol.Decode([]byte(in))
			require.NoError(t, err)
			_, err = f.Subscribe()
			var perr *protocol.Error
			require.True(t, errors.As(err, &perr), "error %v", err)
			require.True(t, strings.HasPrefix(perr.Message, "pusher:subscribe"), perr.Message)
			_, err = f.Unsubscribe()
			require.Error(t, err)
		})
	}
}

func TestConnectionEstablished(t *testing.T) {
	b := protocol.AppendConnectionEstablished(nil, "123.456", protocol.ActivityTimeout)
	require.Equal(t, `{"event":"pusher:connection_established","data":"{\"socket_id\":\"123.456\",\"activity_timeout\":120}"}`, string(b))
	f := decodeServer(t, b)
	require.Equal(t, map[string]any{"socket_id": "123.456", "activity_timeout": 120.0}, dataObject(t, f))
}

func TestServerFramesCarryDataAsString(t *testing.T) {
	cases := map[string]struct {
		frame []byte
		event string
		chann string
		data  map[string]any
	}{
		"pong": {protocol.Pong, "pusher:pong", "", map[string]any{}},
		"succeeded": {protocol.AppendSubscriptionSucceeded(nil, "my-channel"),
			"pusher_internal:subscription_succeeded", "my-channel", map[string]any{}},
		"error null": {protocol.AppendError(nil, protocol.CodeNone, `bad "frame" \ <x>`),
			"pusher:error", "", map[string]any{"code": nil, "message": `bad "frame" \ <x>`}},
		"error 4001": {(&protocol.Error{Code: protocol.CodeAppNotFound, Message: "App key k not found"}).AppendTo(nil),
			"pusher:error", "", map[string]any{"code": 4001.0, "message": "App key k not found"}},
		"subscription error": {(&protocol.SubscriptionError{Channel: "private-x", Type: protocol.SubscriptionUnsupported, Message: "not yet", Status: 501}).AppendTo(nil),
			"pusher:subscription_error", "private-x", map[string]any{"type": "UnsupportedChannel", "error": "not yet", "status": 501.0}},
		"message": {protocol.Message{Event: "client-x", Channel: "presence-a", Data: `{"a":"\n"}`, UserID: "7"}.AppendTo(nil),
			"client-x", "presence-a", map[string]any{"a": "\n"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := decodeServer(t, c.frame)
			require.Equal(t, c.event, f.Event)
			require.Equal(t, c.chann, f.Channel)
			require.Equal(t, c.data, dataObject(t, f))
		})
	}
}

func TestMessageOmitsEmptyFields(t *testing.T) {
	require.Equal(t, `{"event":"pusher:cache_miss","channel":"cache-x"}`,
		string(protocol.Message{Event: protocol.EventCacheMiss, Channel: "cache-x"}.AppendTo(nil)))
}

func TestEncodingEscapes(t *testing.T) {
	for _, s := range []string{"plain", "quote\" backslash\\", "ctl\x00\x01\x1f\t\r\n", "utf8 é 日本 🎉", "bad \xff\xfe utf8", "js \u2028\u2029 seps"} {
		b := protocol.Message{Event: s, Channel: s, Data: s}.AppendTo(nil)
		require.True(t, json.Valid(b), "invalid JSON %q", b)
		f := decodeServer(t, b)
		want := string([]rune(s)) // each invalid byte becomes U+FFFD, as in encoding/json
		require.Equal(t, want, f.Event)
		require.Equal(t, want, *f.Data)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 512)
	allocs := testing.AllocsPerRun(100, func() {
		buf = protocol.AppendSubscriptionSucceeded(buf[:0], "presence-room-1234")
		buf = protocol.AppendConnectionEstablished(buf[:0], "123456789012345.42", protocol.ActivityTimeout)
	})
	require.Zero(t, allocs)
}

var socketIDPattern = regexp.MustCompile(`^\d+\.\d+$`)

// TestSocketIDs: ids are distinct under concurrency, of the form the
// server SDKs accept with each part a safe integer, and unrelated to each
// other: consecutive ids are not close in either part, and every bit of
// each part varies, so a client cannot guess its neighbour's id.
func TestSocketIDs(t *testing.T) {
	const safe = 1<<53 - 1
	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				id := protocol.NewSocketID()
				require.Regexp(t, socketIDPattern, id)
				require.True(t, protocol.ValidSocketID(id))
				mu.Lock()
				require.False(t, seen[id], "duplicate socket id %s", id)
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, 8000)

	parts := func(id string) [2]uint64 {
		a, b, _ := strings.Cut(id, ".")
		x, err := strconv.ParseUint(a, 10, 64)
		require.NoError(t, err)
		y, err := strconv.ParseUint(b, 10, 64)
		require.NoError(t, err)
		require.LessOrEqual(t, x, uint64(safe), id)
		require.LessOrEqual(t, y, uint64(safe), id)
		return [2]uint64{x, y}
	}
	const n = 2000
	var ones [2][53]int
	near := 0
	prev := parts(protocol.NewSocketID())
	for range n {
		p := parts(protocol.NewSocketID())
		for i := range 2 {
			// Random parts are within 2^40 of each other once in 4,096 pairs.
			if max(p[i], prev[i])-min(p[i], prev[i]) < 1<<40 {
				near++
			}
			for bit := range 53 {
				ones[i][bit] += int(p[i] >> bit & 1)
			}
		}
		prev = p
	}
	require.LessOrEqual(t, near, 10, "consecutive ids close to each other")
	for i := range 2 {
		for bit := range 53 {
			// Binomial(2000, 1/2): 1000 ± 22; 800..1200 is over 8 sigma.
			require.InDelta(t, n/2, ones[i][bit], 200, "part %d bit %d", i, bit)
		}
	}
}

// BenchmarkNewSocketID: the cost of one socket id, paid once per connect.
func BenchmarkNewSocketID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = protocol.NewSocketID()
	}
}

func TestValidSocketID(t *testing.T) {
	for s, ok := range map[string]bool{
		"1.2": true, "123456.7890": true,
		"": false, ".": false, "1.": false, ".1": false, "1": false, "1.2.3": false, "a.1": false, "1.2 ": false, "-1.2": false,
	} {
		require.Equal(t, ok, protocol.ValidSocketID(s), s)
		require.Equal(t, ok, socketIDPattern.MatchString(s), s)
	}
}

func TestCloseCodeRanges(t *testing.T) {
	// pusher-js decides on reconnecting by range; a code in the wrong range
	// silently changes client behaviour.
	for _, c := range []protocol.Code{protocol.CodeAppNotFound, protocol.CodeAppDisabled, protocol.CodeUnsupportedProtocol, protocol.CodeNoProtocol, protocol.CodeUnauthorized} {
		require.True(t, c >= 4000 && c < 4100, "%d must be in the refused range", c)
	}
	require.True(t, protocol.CodeReconnect >= 4200 && protocol.CodeReconnect < 4300)
	require.True(t, protocol.CodePongNotReceived >= 4200 && protocol.CodePongNotReceived < 4300)
}

func TestParseChannelData(t *testing.T) {
	for in, want := range map[string]protocol.Member{
		`{"user_id":10,"user_info":{"name":"Mr. Channels"}}`: {UserID: "10", UserInfo: json.RawMessage(`{"name":"Mr. Channels"}`)},
		`{"user_id":"10"}`:                        {UserID: "10"},
		`{"user_id":"7","user_info":null}`:        {UserID: "7"},
		`{"user_id":"a","user_info":{ "x" : 1 }}`: {UserID: "a", UserInfo: json.RawMessage(`{"x":1}`)},
		`{"user_id":1.5}`:                         {UserID: "1.5"},
		// A number is one user however it is spelled: its plain decimal,
		// as JavaScript's String gives it (pusher-js keys members so).
		`{"user_id":1e0}`:                  {UserID: "1"},
		`{"user_id":1.0}`:                  {UserID: "1"},
		`{"user_id":10E-1}`:                {UserID: "1"},
		`{"user_id":-0}`:                   {UserID: "0"},
		`{"user_id":0.000}`:                {UserID: "0"},
		`{"user_id":1.50}`:                 {UserID: "1.5"},
		`{"user_id":-15e-1}`:               {UserID: "-1.5"},
		`{"user_id":12e2}`:                 {UserID: "1200"},
		`{"user_id":0.25E+1}`:              {UserID: "2.5"},
		`{"user_id":1234567890123456789}`:  {UserID: "1234567890123456789"},
		`{"user_id":12345678901234567890}`: {UserID: "12345678901234567890"},
	} {
		got, err := protocol.ParseChannelData(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{``, `{}`, `{"user_id":""}`, `{"user_id":true}`, `{"user_id":{}}`, `[1]`, `{"user_id":null}`,
		`{"user_id":1e999999999}`, `{"user_id":1e-999999999}`, `{"user_id":1e99999999999999999999}`} {
		_, err := protocol.ParseChannelData(in)
		var perr *protocol.Error
		require.True(t, errors.As(err, &perr), "%s: %v", in, err)
	}
}

func TestParseUserData(t *testing.T) {
	m, err := protocol.ParseUserData(`{"id":"12345","user_info":{"n":1},"watchlist":["1"]}`)
	require.NoError(t, err)
	require.Equal(t, protocol.Member{UserID: "12345", UserInfo: json.RawMessage(`{"n":1}`)}, m)
	for _, in := range []string{`{"id":12345}`, `{"id":""}`, `{}`, `nope`} {
		_, err := protocol.ParseUserData(in)
		require.Error(t, err, in)
	}
}

func TestSignin(t *testing.T) {
	f, err := protocol.Decode([]byte(pusherJSFrames[6]))
	require.NoError(t, err)
	si, err := f.Signin()
	require.NoError(t, err)
	require.Equal(t, protocol.Signin{Auth: "278d425bdf160c739803:4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba", UserData: `{"id":"12345"}`}, si)

	b := protocol.AppendSigninSuccess(nil, si.UserData)
	require.Equal(t, `{"event":"pusher:signin_success","data":"{\"user_data\":\"{\\\"id\\\":\\\"12345\\\"}\"}"}`, string(b))
	fr := decodeServer(t, b)
	require.Equal(t, map[string]any{"user_data": `{"id":"12345"}`}, dataObject(t, fr))
}

func TestPresenceFrames(t *testing.T) {
	b := protocol.AppendPresenceSucceeded(nil, "presence-x", []string{"1", "2"},
		map[string]json.RawMessage{"1": json.RawMessage(`{"name":"a"}`)})
	f := decodeServer(t, b)
	require.Equal(t, "pusher_internal:subscription_succeeded", f.Event)
	require.Equal(t, "presence-x", f.Channel)
	require.JSONEq(t, `{"presence":{"ids":["1","2"],"hash":{"1":{"name":"a"},"2":null},"count":2}}`, *f.Data)
	require.JSONEq(t, `{"user_id":"7","user_info":{"a":1}}`, protocol.MemberAddedData("7", json.RawMessage(`{"a":1}`)))
	require.JSONEq(t, `{"user_id":"7"}`, protocol.MemberRemovedData("7"))
	require.JSONEq(t, `{"subscription_count":3}`, protocol.SubscriptionCountData(3))
}

func TestEventData(t *testing.T) {
	for in, want := range map[string]string{
		`{"event":"client-a","data":{"x":"y"}}`:   `{"x":"y"}`,
		`{"event":"client-a","data":"{\"x\":1}"}`: `{"x":1}`,
		`{"event":"client-a","data":5}`:           `5`,
		`{"event":"client-a"}`:                    ``,
	} {
		f, err := protocol.Decode([]byte(in))
		require.NoError(t, err)
		require.Equal(t, want, f.EventData(), in)
	}
}
