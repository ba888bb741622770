package apps

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHistoryField: the history field decodes under either spelling, the
// longest matching prefix wins whatever the order, and channels that
// cannot have a history (user, internal, cache) get none whatever the
// prefixes.
func TestHistoryField(t *testing.T) {
	r, err := Parse([]byte(`[{"id":"a","key":"k","secret":"s","history":[
	  {"prefix":"chat-","events":100,"seconds":120,"rewind":10},
	  {"prefix":"chat-vip-","events":5,"seconds":60},
	  {"prefix":"private-","events":1,"seconds":1}]},
	  {"id":"b","key":"k2","secret":"s2"}]`))
	require.NoError(t, err)
	a := r.ByID("a")
	require.Equal(t, History{Prefix: "chat-", Events: 100, Seconds: 120, Rewind: 10}, a.HistoryFor("chat-1"))
	require.Equal(t, 5, a.HistoryFor("chat-vip-1").Events)
	require.Zero(t, a.HistoryFor("other").Events)
	require.Zero(t, a.HistoryFor("private-cache-x").Events, "a cache channel keeps its last event its own way")
	require.Equal(t, 1, a.HistoryFor("private-x").Events)
	require.Nil(t, r.ByID("b").History, "off by default")
	require.Zero(t, r.ByID("b").HistoryFor("chat-1").Events)
}

// TestHistoryValidation: every bound and prefix rule is an error naming
// the app and the entry.
func TestHistoryValidation(t *testing.T) {
	const ok = `"id":"a","key":"k","secret":"s"`
	for name, tc := range map[string]struct{ in, want string }{
		"no events":       {`{"prefix":"chat-","events":0,"seconds":1}`, `history[0] (prefix "chat-"): events must be 1 to 10000, not 0`},
		"many events":     {`{"prefix":"chat-","events":10001,"seconds":1}`, `events must be 1 to 10000, not 10001`},
		"no seconds":      {`{"prefix":"chat-","events":1,"seconds":0}`, `seconds must be 1 to 86400, not 0`},
		"a day and one":   {`{"prefix":"chat-","events":1,"seconds":86401}`, `seconds must be 1 to 86400, not 86401`},
		"rewind > events": {`{"prefix":"chat-","events":2,"seconds":1,"rewind":3}`, `rewind must be 0 to events (2), not 3`},
		"negative rewind": {`{"prefix":"chat-","events":2,"seconds":1,"rewind":-1}`, `rewind must be 0 to events (2), not -1`},
		"same prefix":     {`{"prefix":"chat-","events":1,"seconds":1},{"prefix":"chat-","events":2,"seconds":1}`, `history[1] (prefix "chat-"): the same prefix as history[0]`},
		"cache prefix":    {`{"prefix":"private-cache-","events":1,"seconds":1}`, `history[0] (prefix "private-cache-"): only names channels without a history`},
		"user prefix":     {`{"prefix":"#server-to-user-u","events":1,"seconds":1}`, `only names channels without a history`},
		"bad prefix":      {`{"prefix":"chat room","events":1,"seconds":1}`, `no channel name starts so`},
		"empty prefix":    {`{"prefix":"","events":1,"seconds":1}`, `history[0] (prefix ""): no channel name starts so`},
		"unknown field":   {`{"prefix":"chat-","events":1,"seconds":1,"secs":2}`, `history[0].secs: unknown`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(`[{` + ok + `,"history":[` + tc.in + `]}]`))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, `"a"`)
		})
	}
}
