package httpapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
)

// seeded starts Redis, a producer with known counts, and the API on it.
// private-gone was occupied once and is vacant again.
func seeded(t *testing.T) *testServer {
	t.Helper()
	srv := redistest.New(t)
	p := apitest.NewProducer(t, srv.Client(t), "node-a")
	p.Add(t, appID, map[string]int64{"private-gone": 1}, map[string]int64{"private-gone": 1})
	// presence-room-1's three sockets belong to two users.
	p.Rec.AddMember(appID, "presence-room-1", "u1", json.RawMessage(`{}`), 2)
	p.Rec.AddMember(appID, "presence-room-1", "u2", json.RawMessage(`{}`), 1)
	p.Add(t, appID, map[string]int64{
		"private-gone": -1, "presence-room-1": 3, "private-a": 2, "public-b": 1, "x=y@z,w;v": 4,
	}, map[string]int64{"presence-room-1": 3, "private-a": 2, "public-b": 1, "x=y@z,w;v": 4})
	return startServer(t, config.Common{Redis: srv.URL()})
}

func ptr[T any](v T) *T { return &v }

func TestPusherGoClient(t *testing.T) {
	t.Parallel()
	s := seeded(t)
	c := s.pusherClient(t, appSecret)

	all, err := c.Channels(pusher.ChannelsParams{})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.ChannelListItem{"presence-room-1": {}, "private-a": {}, "public-b": {}, "x=y@z,w;v": {}}, all.Channels)

	private, err := c.Channels(pusher.ChannelsParams{FilterByPrefix: ptr("private-")})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.ChannelListItem{"private-a": {}}, private.Channels)

	// pusher-http-go sends the prefix unescaped; ';' must not split it.
	odd, err := c.Channels(pusher.ChannelsParams{FilterByPrefix: ptr("x=y@z,w;")})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.ChannelListItem{"x=y@z,w;v": {}}, odd.Channels)

	for name, want := range map[string]int{"private-a": 2, "presence-room-1": 3, "public-b": 1, "x=y@z,w;v": 4} {
		ch, err := c.Channel(name, pusher.ChannelParams{Info: ptr("subscription_count")})
		require.NoError(t, err, name)
		require.Equal(t, &pusher.Channel{Name: name, Occupied: true, SubscriptionCount: want}, ch)
	}
	ch, err := c.Channel("private-gone", pusher.ChannelParams{Info: ptr("subscription_count")})
	require.NoError(t, err)
	require.Equal(t, &pusher.Channel{Name: "private-gone"}, ch)
	ch, err = c.Channel("private-a", pusher.ChannelParams{})
	require.NoError(t, err)
	require.Equal(t, &pusher.Channel{Name: "private-a", Occupied: true}, ch)

	// user_count counts distinct users, not sockets.
	ch, err = c.Channel("presence-room-1", pusher.ChannelParams{Info: ptr("user_count,subscription_count")})
	require.NoError(t, err)
	require.Equal(t, &pusher.Channel{Name: "presence-room-1", Occupied: true, UserCount: 2, SubscriptionCount: 3}, ch)
	users, err := c.Channels(pusher.ChannelsParams{FilterByPrefix: ptr("presence-"), Info: ptr("user_count")})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.ChannelListItem{"presence-room-1": {UserCount: 2}}, users.Channels)
	_, err = c.Channels(pusher.ChannelsParams{Info: ptr("user_count")})
	require.ErrorContains(t, err, "Status Code: 400 - info=user_count is only available for presence channels")

	_, err = s.pusherClient(t, "not-the-secret").Channels(pusher.ChannelsParams{})
	require.ErrorContains(t, err, "Status Code: 401 - Invalid signature: Expected HMAC SHA256 hex digest of \"GET\\n/apps/app-1/channels\\nauth_key=key-1&auth_timestamp=")

	ok := testutil.ToFloat64(s.app.metrics.requests.WithLabelValues("GET /apps/{app_id}/channels/{channel_name}", "200"))
	require.Equal(t, 7.0, ok)
	require.Equal(t, 1.0, testutil.ToFloat64(s.app.metrics.requests.WithLabelValues("GET /apps/{app_id}/channels", "401")))
	require.Equal(t, 0.0, testutil.ToFloat64(s.app.metrics.redisErrors))
}

func TestSignatureChecks(t *testing.T) {
	t.Parallel()
	s := seeded(t)
	const path = "/apps/" + appID + "/channels"
	now := time.Now()
	query := url.Values{"filter_by_prefix": {"private-"}}
	body := []byte(`{}`)

	for _, tc := range []struct {
		name     string
		rawQuery string
		body     []byte
		code     int
		want     string
	}{
		{name: "valid", rawQuery: signed("GET", path, query, nil, appKey, appSecret, now), code: 200, want: `{"channels":{"private-a":{}}}`},
		{name: "valid with body", rawQuery: signed("GET", path, query, body, appKey, appSecret, now), body: body, code: 200, want: `{"channels":{"private-a":{}}}`},
		{name: "wrong secret", rawQuery: signed("GET", path, query, nil, appKey, "wrong", now), code: 401, want: `Invalid signature: Expected HMAC SHA256 hex digest of "GET\n/apps/app-1/channels\nauth_key=key-1&auth_timestamp=`},
		{name: "wrong key", rawQuery: signed("GET", path, query, nil, offKey, appSecret, now), code: 401, want: `Invalid auth_key: "key-off" is not a key of app "app-1"`},
		{name: "stale timestamp", rawQuery: signed("GET", path, query, nil, appKey, appSecret, now.Add(-610*time.Second)), code: 401, want: "Timestamp expired: Given timestamp ("},
		{name: "future timestamp", rawQuery: signed("GET", path, query, nil, appKey, appSecret, now.Add(610*time.Second)), code: 401, want: "not within 600s of server time"},
		{name: "tampered query", rawQuery: strings.Replace(signed("GET", path, query, nil, appKey, appSecret, now), "private-", "presence-", 1), code: 401, want: "Invalid signature"},
		{name: "added parameter", rawQuery: signed("GET", path, query, nil, appKey, appSecret, now) + "&info=user_count", code: 401, want: "Invalid signature"},
		{name: "repeated parameter", rawQuery: signed("GET", path, query, nil, appKey, appSecret, now) + "&filter_by_prefix=presence-", code: 401, want: `Duplicate query parameter "filter_by_prefix"`},
		{name: "tampered body", rawQuery: signed("GET", path, query, body, appKey, appSecret, now), body: []byte(`{"x":1}`), code: 401, want: "Invalid body_md5: Expected "},
		{name: "unsigned body", rawQuery: signed("GET", path, query, nil, appKey, appSecret, now), body: body, code: 401, want: "Missing body_md5"},
		{name: "no signature", rawQuery: "filter_by_prefix=private-", code: 401, want: "Missing auth_key"},
		{name: "malformed query", rawQuery: "auth_key=%zz", code: 400, want: "Malformed query string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(t, http.MethodGet, path, tc.rawQuery, tc.body)
			require.Equal(t, tc.code, r.code, r.body)
			require.Contains(t, r.body, tc.want)
			if tc.code != 200 {
				require.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
			}
		})
	}
}

func TestAmbiguousQueryReplay(t *testing.T) {
	t.Parallel()
	// The string to sign is not URL-escaped, so the signature of
	// filter_by_prefix=presence-&info=user_count also covers a single
	// filter_by_prefix whose value spells both parameters. A captured
	// request re-sent that way must not get through.
	s := seeded(t)
	const path = "/apps/" + appID + "/channels"
	q := auth.SignRequest("GET", path, url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count"}}, nil, appKey, appSecret, time.Now())
	r := s.do(t, http.MethodGet, path, q.Encode(), nil)
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.JSONEq(t, `{"channels":{"presence-room-1":{"user_count":2}}}`, r.body)

	replay := "filter_by_prefix=presence-%26info%3Duser_count"
	for _, k := range []string{"auth_key", "auth_timestamp", "auth_version", "auth_signature"} {
		replay += "&" + k + "=" + url.QueryEscape(q.Get(k))
	}
	r = s.do(t, http.MethodGet, path, replay, nil)
	require.Equal(t, http.StatusUnauthorized, r.code, r.body)
	require.Contains(t, r.body, `Ambiguous query parameter "filter_by_prefix": signature ambiguous`)
}

func TestResponseShapes(t *testing.T) {
	t.Parallel()
	s := seeded(t)
	list := "/apps/" + appID + "/channels"
	one := func(name string) string { return list + "/" + name }
	subs := url.Values{"info": {"subscription_count"}}

	for _, tc := range []struct {
		name  string
		path  string
		query url.Values
		want  string
	}{
		{"listing", list, nil, `{"channels":{"presence-room-1":{},"private-a":{},"public-b":{},"x=y@z,w;v":{}}}`},
		{"prefix", list, url.Values{"filter_by_prefix": {"pr"}}, `{"channels":{"presence-room-1":{},"private-a":{}}}`},
		{"prefix without match", list, url.Values{"filter_by_prefix": {"private-gone"}}, `{"channels":{}}`},
		{"empty info", list, url.Values{"info": {""}}, `{"channels":{"presence-room-1":{},"private-a":{},"public-b":{},"x=y@z,w;v":{}}}`},
		{"occupied", one("private-a"), subs, `{"occupied":true,"subscription_count":2}`},
		{"occupied presence", one("presence-room-1"), subs, `{"occupied":true,"subscription_count":3}`},
		{"occupied without info", one("public-b"), nil, `{"occupied":true}`},
		{"odd name", one("x=y@z,w;v"), subs, `{"occupied":true,"subscription_count":4}`},
		{"vacated", one("private-gone"), subs, `{"occupied":false}`},
		{"never seen", one("public-never"), nil, `{"occupied":false}`},
		{"user channel", one("#server-to-user-7"), subs, `{"occupied":false}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.get(t, tc.path, tc.query)
			require.Equal(t, http.StatusOK, r.code, r.body)
			require.Equal(t, tc.want+"\n", r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
		})
	}
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	s := seeded(t)
	list := "/apps/" + appID + "/channels"
	one := func(name string) string { return list + "/" + name }
	info := func(v string) url.Values { return url.Values{"info": {v}} }
	now := time.Now()

	for _, tc := range []struct {
		name   string
		method string
		path   string
		query  url.Values
		key    string
		secret string
		body   []byte
		code   int
		want   string
	}{
		{name: "unknown app", path: "/apps/nope/channels", code: 404, want: `Unknown app id "nope"`},
		{name: "disabled app", path: "/apps/" + offID + "/channels", key: offKey, secret: offSecret, code: 403, want: `App "app-off" is disabled`},
		{name: "disabled app, bad signature", path: "/apps/" + offID + "/channels", key: offKey, secret: "wrong", code: 401, want: "Invalid signature"},
		{name: "unknown route", path: "/apps/" + appID + "/nothing", code: 404},
		{name: "channel name with a space", path: one("bad%20name"), code: 400, want: `Invalid channel name: channel name "bad name" has characters outside`},
		{name: "channel name too long", path: one(strings.Repeat("a", 201)), code: 400, want: "over the limit of 200"},
		{name: "channel name with a slash", path: one("a%2Fb"), code: 400, want: "Invalid channel name"},
		{name: "user_count on a private channel", path: one("private-a"), query: info("user_count"), code: 400, want: `info=user_count is only available for presence channels, and "private-a" is not one`},
		{name: "unknown attribute", path: one("private-a"), query: info("subscription_count,bogus"), code: 400, want: `Unsupported info attribute "bogus"`},
		{name: "cache on a non-cache channel", path: one("private-a"), query: info("cache"), code: 400, want: "info=cache is only available for cache channels"},
		{name: "cache on a cache channel, nothing cached", path: one("cache-a"), query: info("cache"), code: 200, want: `{"occupied":false}`},
		{name: "user_count on presence", path: one("presence-room-1"), query: info("user_count"), code: 200, want: `{"occupied":true,"user_count":2}`},
		{name: "client error before 501", path: one("presence-room-1"), query: info("user_count,bogus"), code: 400, want: `"bogus"`},
		{name: "listing user_count without prefix", path: list, query: info("user_count"), code: 400, want: "set filter_by_prefix to presence-"},
		{name: "listing user_count on private", path: list, query: url.Values{"info": {"user_count"}, "filter_by_prefix": {"private-"}}, code: 400, want: "only available for presence channels"},
		{name: "listing user_count on presence", path: list, query: url.Values{"info": {"user_count"}, "filter_by_prefix": {"presence-room"}}, code: 200, want: `{"channels":{"presence-room-1":{"user_count":2}}}`},
		{name: "listing subscription_count", path: list, query: info("subscription_count"), code: 400, want: `Unsupported info attribute "subscription_count" for a channel listing`},
		{name: "POST listing", method: "POST", path: list, code: 405},
		{name: "DELETE channel", method: "DELETE", path: one("private-a"), code: 405},
		{name: "body over the cap", path: list, body: make([]byte, maxBodyBytes+1), code: 413, want: "Request body is over the limit of 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, key, secret := http.MethodGet, appKey, appSecret
			if tc.method != "" {
				method = tc.method
			}
			if tc.key != "" {
				key = tc.key
			}
			if tc.secret != "" {
				secret = tc.secret
			}
			// Sign the decoded path, as clients do.
			signPath, err := url.PathUnescape(tc.path)
			require.NoError(t, err)
			r := s.do(t, method, tc.path, signed(method, signPath, tc.query, tc.body, key, secret, now), tc.body)
			require.Equal(t, tc.code, r.code, r.body)
			require.Contains(t, r.body, tc.want)
			if tc.code == 405 {
				require.Equal(t, "GET, HEAD", r.header.Get("Allow"))
			}
		})
	}
}

func TestClusterListing(t *testing.T) {
	t.Parallel()
	cluster := redistest.NewCluster(t)
	p := apitest.NewProducer(t, cluster.Client(t), "node-a")
	q := apitest.NewProducer(t, cluster.Client(t), "node-b")
	want := map[string]int64{}
	for i, name := range []string{"private-a", "private-b", "presence-c", "public-d", "public-e"} {
		want[name] = int64(i + 1)
		p.Add(t, appID, map[string]int64{name: int64(i + 1)}, want)
	}
	want["private-a"] += 10
	q.Add(t, appID, map[string]int64{"private-a": 10}, want)

	s := startServer(t, config.Common{RedisCluster: cluster.Seeds()})
	c := s.pusherClient(t, appSecret)
	all, err := c.Channels(pusher.ChannelsParams{})
	require.NoError(t, err)
	require.Len(t, all.Channels, 5)
	for name := range want {
		require.Contains(t, all.Channels, name)
	}
	private, err := c.Channels(pusher.ChannelsParams{FilterByPrefix: ptr("private-")})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.ChannelListItem{"private-a": {}, "private-b": {}}, private.Channels)
	ch, err := c.Channel("private-a", pusher.ChannelParams{Info: ptr("subscription_count")})
	require.NoError(t, err)
	require.Equal(t, 11, ch.SubscriptionCount)
	r := s.get(t, "/apps/"+appID+"/channels/presence-c", url.Values{"info": {"subscription_count"}})
	require.Equal(t, `{"occupied":true,"subscription_count":3}`+"\n", r.body)
}
