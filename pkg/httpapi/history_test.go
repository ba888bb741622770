package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/history"
)

// TestHistoryEndpoint: events published by the real Pusher client, one
// by one and in a batch, are read back in order from GET .../events with
// since and limit; a since older than the history holds says lost; bad
// queries, a channel without a history and bad signatures are refused.
// On a single Redis and on a Cluster.
func TestHistoryEndpoint(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, common config.Common) {
		s := startServer(t, common)
		c := s.pusherClient(t, appSecret)
		const path = "/apps/" + appID + "/channels/chat-1/events"
		read := func(q url.Values) history.Page {
			t.Helper()
			r := s.get(t, path, q)
			require.Equal(t, http.StatusOK, r.code, r.body)
			var p history.Page
			require.NoError(t, json.Unmarshal([]byte(r.body), &p))
			return p
		}
		require.Equal(t, history.Page{Events: []history.Event{}}, read(nil), "nothing published yet")

		for i := range 3 {
			require.NoError(t, c.Trigger("chat-1", "e", map[string]int{"n": i}))
		}
		_, err := c.TriggerBatch([]pusher.Event{{Channel: "chat-1", Name: "b", Data: "x"}, {Channel: "other", Name: "b", Data: "y"}})
		require.NoError(t, err)

		all := read(nil)
		require.False(t, all.Lost)
		require.False(t, all.More)
		require.Len(t, all.Events, 3, "the channel's events: 3")
		require.Equal(t, []string{`{"n":1}`, `{"n":2}`, "x"}, []string{all.Events[0].Data, all.Events[1].Data, all.Events[2].Data})

		p := read(url.Values{"since": {all.Events[0].Serial}, "limit": {"1"}})
		require.Equal(t, all.Events[1:2], p.Events)
		require.True(t, p.More)
		require.False(t, p.Lost)
		p = read(url.Values{"since": {all.Events[1].Serial}})
		require.Equal(t, all.Events[2:], p.Events)
		require.False(t, p.More)
		p = read(url.Values{"since": {"1-0"}})
		require.True(t, p.Lost, "the first event was trimmed")
		require.Equal(t, all.Events, p.Events)

		for q, want := range map[string]string{
			"limit=0":      "limit",
			"limit=1001":   "limit",
			"limit=x":      "limit",
			"since=abc":    "since",
			"since=1-2-3":  "since",
			"since=-1":     "since",
			"since=1-0%20": "since",
		} {
			v, err := url.ParseQuery(q)
			require.NoError(t, err)
			r := s.get(t, path, v)
			require.Equal(t, http.StatusBadRequest, r.code, q)
			require.Contains(t, r.body, want, q)
		}
		r := s.get(t, "/apps/"+appID+"/channels/other/events", nil)
		require.Equal(t, http.StatusNotFound, r.code)
		require.Contains(t, r.body, "has no history")
		r = s.get(t, "/apps/"+appID+"/channels/chat-cache-x/events", nil)
		require.Equal(t, http.StatusOK, r.code, "chat-cache-x is no cache channel")

		now := time.Now()
		q := url.Values{"since": {all.Events[0].Serial}}
		r = s.do(t, http.MethodGet, path, signed(http.MethodGet, path, q, nil, appKey, "wrong", now), nil)
		require.Equal(t, http.StatusUnauthorized, r.code)
		tampered := strings.Replace(signed(http.MethodGet, path, q, nil, appKey, appSecret, now), "since="+all.Events[0].Serial, "since="+all.Events[1].Serial, 1)
		r = s.do(t, http.MethodGet, path, tampered, nil)
		require.Equal(t, http.StatusUnauthorized, r.code, "a since changed after signing")
	})
}

// FuzzHistoryQuery: whatever the query, parseHistoryQuery either refuses
// it or returns a limit in bounds and a since that is empty or a serial.
func FuzzHistoryQuery(f *testing.F) {
	for _, s := range []string{"", "since=1-0", "limit=1000", "limit=0", "since=99999999999999999999-1&limit=7", "since=%00", "limit=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := parseHistoryQuery(v)
		if err != nil {
			return
		}
		require.True(t, q.limit >= 1 && q.limit <= maxHistoryLimit, "limit %d", q.limit)
		if q.since != "" {
			require.NoError(t, history.CheckSerial(q.since))
			require.NotContains(t, q.since, " ")
		}
		if l := v.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			require.NoError(t, err)
			require.Equal(t, n, q.limit)
		}
	})
}
