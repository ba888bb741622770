package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/logging"
)

const listPath = "/apps/" + appID + "/channels"

// requireFresh checks the freshness headers of a count response: one
// registered node (the seeding producer, heartbeating every 200ms), none stale.
func requireFresh(t *testing.T, r response) {
	t.Helper()
	for _, h := range []string{headerAge, headerOldestHeartbeat, headerNodes, headerStaleNodes} {
		_, err := strconv.Atoi(r.header.Get(h))
		require.NoError(t, err, "header %s is %q", h, r.header.Get(h))
	}
	require.Equal(t, "1", r.header.Get(headerNodes))
	require.Equal(t, "0", r.header.Get(headerStaleNodes))
	oldest, _ := strconv.Atoi(r.header.Get(headerOldestHeartbeat))
	require.Less(t, oldest, 3000, "the producer heartbeats every 200ms")
}

func TestLeaderboardAndRank(t *testing.T) {
	t.Parallel()
	s := seeded(t)
	r := s.get(t, listPath, url.Values{"order": {"subscription_count"}, "limit": {"3"}})
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, `{"channels":{"presence-room-1":{"subscription_count":3},"private-a":{"subscription_count":2},"x=y@z,w;v":{"subscription_count":4}},"order":["x=y@z,w;v","presence-room-1","private-a"]}`+"\n", r.body)
	requireFresh(t, r)
	// pusher-http-go reads the same body as a listing (it ignores "order").
	var list pusher.ChannelsList
	require.NoError(t, json.Unmarshal([]byte(r.body), &list))
	require.Len(t, list.Channels, 3)

	// The default limit covers this small app.
	r = s.get(t, listPath, url.Values{"order": {"subscription_count"}})
	require.Contains(t, r.body, `"order":["x=y@z,w;v","presence-room-1","private-a","public-b"]`)

	for name, rank := range map[string]int{"x=y@z,w;v": 1, "presence-room-1": 2, "private-a": 3, "public-b": 4} {
		r := s.get(t, listPath+"/"+name, url.Values{"info": {"rank,subscription_count"}})
		require.Equal(t, http.StatusOK, r.code, r.body)
		require.Contains(t, r.body, fmt.Sprintf(`,"rank":%d}`, rank), name)
		requireFresh(t, r)
		var ch pusher.Channel
		require.NoError(t, json.Unmarshal([]byte(r.body), &ch))
		require.True(t, ch.Occupied)
		require.Positive(t, ch.SubscriptionCount)
	}
	r = s.get(t, listPath+"/presence-room-1", url.Values{"info": {"user_count,rank"}})
	require.Equal(t, `{"occupied":true,"user_count":2,"rank":2}`+"\n", r.body)
	r = s.get(t, listPath+"/private-gone", url.Values{"info": {"rank"}})
	require.Equal(t, `{"occupied":false}`+"\n", r.body)
	requireFresh(t, r)
}

func TestListingPages(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	p := apitest.NewProducer(t, srv.Client(t), "node-a")
	want := map[string]int64{}
	for i := range 250 {
		want[fmt.Sprintf("private-%03d", i)] = 1
	}
	for i := range 30 {
		want[fmt.Sprintf("presence-%02d", i)] = 2
		p.Rec.AddMember(appID, fmt.Sprintf("presence-%02d", i), "u1", json.RawMessage(`{}`), 2)
	}
	p.Add(t, appID, want, want)
	s := startServer(t, config.Common{Redis: srv.URL()})

	walk := func(query url.Values) (map[string]json.RawMessage, int) {
		t.Helper()
		got := map[string]json.RawMessage{}
		pages := 0
		for cursor := ""; ; pages++ {
			q := url.Values{}
			for k, v := range query {
				q[k] = v
			}
			q.Set("cursor", cursor)
			r := s.get(t, listPath, q)
			require.Equal(t, http.StatusOK, r.code, r.body)
			requireFresh(t, r)
			var page struct {
				Channels   map[string]json.RawMessage `json:"channels"`
				NextCursor *string                    `json:"next_cursor"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.body), &page))
			var list pusher.ChannelsList // the SDK's type still decodes a page
			require.NoError(t, json.Unmarshal([]byte(r.body), &list))
			for name, v := range page.Channels {
				require.NotContains(t, got, name, "duplicate")
				got[name] = v
			}
			if page.NextCursor == nil {
				return got, pages + 1
			}
			require.NotEmpty(t, *page.NextCursor)
			cursor = *page.NextCursor
		}
	}
	all, pages := walk(url.Values{"limit": {"100"}})
	require.Len(t, all, 280)
	require.Equal(t, 3, pages)
	private, _ := walk(url.Values{"limit": {"1000"}, "filter_by_prefix": {"private-1"}})
	require.Len(t, private, 100)
	users, pages := walk(url.Values{"limit": {"7"}, "filter_by_prefix": {"presence-"}, "info": {"user_count"}})
	require.Len(t, users, 30)
	require.Equal(t, 5, pages)
	require.JSONEq(t, `{"user_count":1}`, string(users["presence-07"]))

	// Errors of the extension's parameters.
	expired := base64.RawURLEncoding.EncodeToString([]byte("0123456789abcdef:private-001"))
	for _, tc := range []struct {
		query url.Values
		code  int
		want  string
	}{
		{url.Values{"limit": {"0"}}, 400, `Invalid limit "0": an integer from 1 to 1000`},
		{url.Values{"limit": {"1001"}}, 400, "Invalid limit"},
		{url.Values{"limit": {"ten"}}, 400, "Invalid limit"},
		{url.Values{"order": {"name"}}, 400, `Unsupported order "name"`},
		{url.Values{"order": {"subscription_count"}, "filter_by_prefix": {"private-"}}, 400, "cannot be combined with filter_by_prefix"},
		{url.Values{"order": {"subscription_count"}, "cursor": {expired}}, 400, "takes limit but no cursor"},
		{url.Values{"cursor": {"not a cursor"}}, 400, "Malformed cursor"},
		{url.Values{"cursor": {base64.RawURLEncoding.EncodeToString([]byte("xyz:a"))}}, 400, "Malformed cursor"},
		{url.Values{"cursor": {expired}}, 410, "Cursor expired"},
		{url.Values{"limit": {"5"}, "info": {"user_count"}}, 400, "only available for presence channels"},
	} {
		r := s.get(t, listPath, tc.query)
		require.Equal(t, tc.code, r.code, "%v: %s", tc.query, r.body)
		require.Contains(t, r.body, tc.want, tc.query)
	}
}

// startWith runs an App with cfg's listing settings on common, as startServer.
func startWith(t *testing.T, common config.Common, cfg config.HTTPAPI) *testServer {
	t.Helper()
	common.AdminAddr = "127.0.0.1:0"
	common.Apps = testApps(t)
	cfg.Common, cfg.Addr = common, "127.0.0.1:0"
	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: cfg, Logger: logging.TestLogger(t), Registry: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return &testServer{app: a, base: "http://" + a.Addr(), reg: reg}
}

func TestFullListingIsShared(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	p := apitest.NewProducer(t, srv.Client(t), "node-a")
	p.Add(t, appID, map[string]int64{"a": 1, "b": 2}, map[string]int64{"a": 1, "b": 2})
	// A long cache TTL: nothing here may depend on how fast the test runs.
	cfg := config.HTTPAPI{ListingCacheTTL: time.Minute, ListingLockTTL: 10 * time.Second}
	s1 := startWith(t, config.Common{Redis: srv.URL()}, cfg)
	s2 := startWith(t, config.Common{Redis: srv.URL()}, cfg)

	r := s1.get(t, listPath, nil)
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, `{"channels":{"a":{},"b":{}}}`+"\n", r.body)
	require.Equal(t, "computed", r.header.Get(headerListing))
	require.Equal(t, "0", r.header.Get(headerAge))
	requireFresh(t, r)
	// The cache is in Redis: another replica reuses the result.
	r2 := s2.get(t, listPath, nil)
	require.Equal(t, r.body, r2.body)
	require.Equal(t, "cached", r2.header.Get(headerListing))
	requireFresh(t, r2)
	require.Equal(t, 1.0, testutil.ToFloat64(s1.app.metrics.listingComputed))
	require.Equal(t, 0.0, testutil.ToFloat64(s2.app.metrics.listingComputed))
	require.Equal(t, 1.0, testutil.ToFloat64(s2.app.metrics.listingShared.WithLabelValues("cached")))

	// A vacated channel invalidates the cached listing at once.
	p.Add(t, appID, map[string]int64{"a": -1}, map[string]int64{"b": 2})
	r = s2.get(t, listPath, nil)
	require.Equal(t, `{"channels":{"b":{}}}`+"\n", r.body)
	require.Equal(t, "computed", r.header.Get(headerListing))
	// Each prefix is a listing of its own.
	r = s1.get(t, listPath, url.Values{"filter_by_prefix": {"a"}})
	require.Equal(t, `{"channels":{}}`+"\n", r.body)
	require.Equal(t, "computed", r.header.Get(headerListing))

	// The body is what encoding/json would write for Pusher's shape.
	var list pusher.ChannelsList
	require.NoError(t, json.Unmarshal([]byte(r2.body), &list))
	require.Equal(t, map[string]pusher.ChannelListItem{"a": {}, "b": {}}, list.Channels)
}

func TestEncodeListingMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	ls := counts.Listing{
		Channels: map[string]int64{"presence-b": 2, "presence-a<&>": 1, "presence-c": 5, "presence-\"q\\é\u2028": 1},
		Users:    map[string]int64{"presence-b": 1, "presence-a<&>": 1, "presence-c": 3, "presence-\"q\\é\u2028": 1},
	}
	for _, users := range []bool{false, true} {
		resp := struct {
			Channels map[string]listAttributes `json:"channels"`
		}{Channels: map[string]listAttributes{}}
		for name := range ls.Channels {
			resp.Channels[name] = listAttributes{}
			if users {
				n := ls.Users[name]
				resp.Channels[name] = listAttributes{UserCount: &n}
			}
		}
		want, err := json.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, string(want)+"\n", string(encodeListing(ls, users)))
	}
}

// TestEncodeLeaderboardMatchesEncodingJSON: the leaderboard's hand-written
// body is, byte for byte, what encoding/json writes for its shape: for no
// channels, and for random leaderboards of names with the characters
// encoding/json escapes.
func TestEncodeLeaderboardMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "-", "presence-", "<", "&", ">", `"`, `\`, "é", "\u2028", "\x01", "_", "."}
	for round := range 200 {
		var top []counts.ChannelCount
		seen := map[string]bool{}
		for range rng.IntN(30) {
			name := ""
			for range 1 + rng.IntN(8) {
				name += alphabet[rng.IntN(len(alphabet))]
			}
			if !seen[name] {
				seen[name] = true
				top = append(top, counts.ChannelCount{Name: name, Count: rng.Int64N(1 << 40)})
			}
		}
		resp := struct {
			Channels map[string]listAttributes `json:"channels"`
			Order    []string                  `json:"order"`
		}{Channels: map[string]listAttributes{}, Order: []string{}}
		for _, c := range top {
			resp.Channels[c.Name] = listAttributes{SubscriptionCount: &c.Count}
			resp.Order = append(resp.Order, c.Name)
		}
		want, err := json.Marshal(resp)
		require.NoError(t, err)
		require.Equal(t, string(want)+"\n", string(encodeLeaderboard(top)), "round %d", round)
	}
}

func TestClusterLeaderboardAndPages(t *testing.T) {
	t.Parallel()
	cluster := redistest.NewCluster(t)
	p := apitest.NewProducer(t, cluster.Client(t), "node-a")
	want := map[string]int64{}
	for i := range 120 {
		want[fmt.Sprintf("ch-%03d", i)] = int64(i%10 + 1)
	}
	p.Add(t, appID, want, want)
	s := startServer(t, config.Common{RedisCluster: cluster.Seeds()})
	r := s.get(t, listPath, url.Values{"order": {"subscription_count"}, "limit": {"2"}})
	require.Equal(t, `{"channels":{"ch-109":{"subscription_count":10},"ch-119":{"subscription_count":10}},"order":["ch-119","ch-109"]}`+"\n", r.body)
	requireFresh(t, r)
	r = s.get(t, listPath+"/ch-099", url.Values{"info": {"rank"}})
	require.Equal(t, `{"occupied":true,"rank":3}`+"\n", r.body)
	seen := 0
	for cursor := ""; ; {
		r := s.get(t, listPath, url.Values{"limit": {"50"}, "cursor": {cursor}})
		require.Equal(t, http.StatusOK, r.code, r.body)
		var page struct {
			Channels   map[string]struct{} `json:"channels"`
			NextCursor string              `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.body), &page))
		seen += len(page.Channels)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Equal(t, 120, seen)
	r = s.get(t, listPath, nil)
	require.Equal(t, "computed", r.header.Get(headerListing))
	requireFresh(t, r)
}

// BenchmarkEncodeLeaderboard encodes a leaderboard of 1,000 channels by
// hand (encodeLeaderboard) and with encoding/json (the shape it writes,
// a map and a slice), in the same run.
func BenchmarkEncodeLeaderboard(b *testing.B) {
	top := make([]counts.ChannelCount, 1000)
	for i := range top {
		top[i] = counts.ChannelCount{Name: fmt.Sprintf("recovery-%d", i), Count: int64(1000 - i)}
	}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			_ = encodeLeaderboard(top)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			resp := struct {
				Channels map[string]listAttributes `json:"channels"`
				Order    []string                  `json:"order"`
			}{Channels: make(map[string]listAttributes, len(top)), Order: make([]string, 0, len(top))}
			for _, c := range top {
				resp.Channels[c.Name] = listAttributes{SubscriptionCount: &c.Count}
				resp.Order = append(resp.Order, c.Name)
			}
			if _, err := json.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
