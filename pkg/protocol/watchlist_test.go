package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/protocol"
)

// TestInternalChannels: the server's own channels (the signed-in users,
// the bus's per-user and per-list channels) are KindInternal: refused to
// clients and HTTP API callers, without a count, never in webhooks.
func TestInternalChannels(t *testing.T) {
	for _, name := range []string{protocol.SignedInChannel, protocol.WatchUserChannel("7"),
		protocol.TerminateUserChannel("7"), protocol.AdmissionChannel("presence-x")} {
		k := protocol.ChannelKind(name)
		require.Equal(t, protocol.KindInternal, k, name)
		require.False(t, k.Counted(), name)
		require.False(t, k.AnnouncesCounts(), name)
		require.False(t, k.HasMembers(), name)
		require.False(t, k.NeedsAuth(), name)
		require.False(t, k.AllowsClientEvents(), name)
		require.False(t, k.Logged(), name)
		require.Error(t, protocol.ValidateChannelNameMax(name, protocol.MaxChannelNameLength), name)
	}
	for _, name := range []string{"room", "presence-room", "#server-to-user-7"} {
		require.True(t, protocol.ChannelKind(name).Logged(), name)
	}
}

func TestParseWatchlist(t *testing.T) {
	for in, want := range map[string][]string{
		`{"id":"1"}`:                               nil,
		`{"id":"1","watchlist":null}`:              nil,
		`{"id":"1","watchlist":[]}`:                nil,
		`{"id":"1","watchlist":["2",3,"2","x y"]}`: {"2", "3", "x y"},
	} {
		got, err := protocol.ParseWatchlist(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{`{"watchlist":"2"}`, `{"watchlist":[""]}`, `{"watchlist":[true]}`, `{"watchlist":[null]}`, `nope`} {
		_, err := protocol.ParseWatchlist(in)
		var perr *protocol.Error
		require.ErrorAs(t, err, &perr, in)
	}
}

// TestWatchlistEvents: the frame pusher-js's watchlist parses: no channel,
// data a JSON string of {"events":[{"name","user_ids"}]}, one event per
// non-empty list.
func TestWatchlistEvents(t *testing.T) {
	for _, tc := range []struct {
		online, offline []string
		want            string
	}{
		{[]string{"1", "2"}, []string{"3"}, `{"events":[{"name":"online","user_ids":["1","2"]},{"name":"offline","user_ids":["3"]}]}`},
		{nil, []string{"3"}, `{"events":[{"name":"offline","user_ids":["3"]}]}`},
		{[]string{`q"uote`}, nil, `{"events":[{"name":"online","user_ids":["q\"uote"]}]}`},
	} {
		var f struct {
			Event   string  `json:"event"`
			Channel *string `json:"channel"`
			Data    string  `json:"data"`
		}
		b := protocol.AppendWatchlistEvents(nil, tc.online, tc.offline)
		require.NoError(t, json.Unmarshal(b, &f), string(b))
		require.Equal(t, "pusher_internal:watchlist_events", f.Event)
		require.Nil(t, f.Channel)
		require.JSONEq(t, tc.want, f.Data)
	}
}
