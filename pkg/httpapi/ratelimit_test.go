package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/ratelimit"
)

// The apps of the limit tests: app-rl with small budgets and short
// channel names, app-long with long ones.
const (
	rlID, rlKey, rlSecret       = "app-rl", "key-rl", "secret-rl"
	longID, longKey, longSecret = "app-long", "key-long", "secret-long"
)

// limitReplicas starts n API replicas on one Redis, each with its own
// limiter client, their budgets' window stretched to a minute so that no
// window ends during the test.
func limitReplicas(t *testing.T, n int) []*testServer {
	t.Helper()
	srv := redistest.New(t)
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: appSecret, Enabled: true},
		{ID: rlID, Key: rlKey, Secret: rlSecret, Enabled: true, MaxBackendEventsPerSecond: 5, MaxReadRequestsPerSecond: 3, MaxChannelNameLength: 10},
		{ID: longID, Key: longKey, Secret: longSecret, Enabled: true, MaxChannelNameLength: 300},
	})
	require.NoError(t, err)
	out := make([]*testServer, n)
	for i := range out {
		preg := prometheus.NewRegistry()
		a, err := New(Options{Config: config.HTTPAPI{
			Common: config.Common{Redis: srv.URL(), AdminAddr: "127.0.0.1:0", Apps: reg},
			Addr:   "127.0.0.1:0",
		}, Logger: logging.TestLogger(t), Registry: preg})
		require.NoError(t, err)
		a.limiter = ratelimit.New(a.rdb, ratelimit.Options{Keyspace: a.ks, Metrics: a.limiter.Metrics(), Logger: a.log, Window: time.Minute})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- a.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-errc)
		})
		out[i] = &testServer{app: a, base: "http://" + a.Addr(), reg: preg}
	}
	return out
}

// as sends a request signed with app id's credentials.
func (s *testServer) as(t *testing.T, id, key, secret, method, path, body string) response {
	t.Helper()
	p := "/apps/" + id + path
	return s.do(t, method, p, signed(method, p, url.Values{}, []byte(body), key, secret, time.Now()), []byte(body))
}

// TestRateLimitsAcrossReplicas: two replicas share an app's budgets of
// published events (each channel counting one) and of reads; past them
// the answer is 429 naming the setting, with Retry-After; an app without
// limits is never limited.
func TestRateLimitsAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := limitReplicas(t, 2)
	a, b := rs[0], rs[1]
	post := func(s *testServer, body string) response {
		return s.as(t, rlID, rlKey, rlSecret, http.MethodPost, "/events", body)
	}
	r := post(a, `{"name":"e","data":"d","channels":["a","b","c"]}`)
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, "5", r.header.Get("X-RateLimit-Limit"))
	require.Equal(t, "2", r.header.Get("X-RateLimit-Remaining"))
	r = b.as(t, rlID, rlKey, rlSecret, http.MethodPost, "/batch_events", `{"batch":[{"name":"e","data":"d","channel":"a"},{"name":"e","data":"d","channel":"b"}]}`)
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, "0", r.header.Get("X-RateLimit-Remaining"))
	for _, s := range rs {
		r = post(s, `{"name":"e","data":"d","channel":"a"}`)
		require.Equal(t, http.StatusTooManyRequests, r.code, r.body)
		require.Contains(t, r.body, `app "app-rl" allows 5 events`)
		require.Contains(t, r.body, "maxBackendEventsPerSecond")
		require.NotEmpty(t, r.header.Get("Retry-After"))
	}

	for i := range 3 {
		r = rs[i%2].as(t, rlID, rlKey, rlSecret, http.MethodGet, "/channels", "")
		require.Equal(t, http.StatusOK, r.code, r.body)
	}
	r = b.as(t, rlID, rlKey, rlSecret, http.MethodGet, "/channels/a", "")
	require.Equal(t, http.StatusTooManyRequests, r.code, r.body)
	require.Contains(t, r.body, "maxReadRequestsPerSecond")
	require.NoError(t, testutil.GatherAndCompare(b.reg, strings.NewReader(`
# HELP headcount_ratelimit_rejected_total Requests and client events refused for going over the app's per-second limit, by app and kind (client_events, backend_events, read_requests).
# TYPE headcount_ratelimit_rejected_total counter
headcount_ratelimit_rejected_total{app="app-rl",kind="backend_events"} 1
headcount_ratelimit_rejected_total{app="app-rl",kind="read_requests"} 1
`), "headcount_ratelimit_rejected_total"))

	// An unsigned request spends nothing: the app's budget is its own.
	r = a.do(t, http.MethodGet, "/apps/"+rlID+"/channels", "auth_key=key-rl", nil)
	require.Equal(t, http.StatusUnauthorized, r.code, r.body)

	for range 10 {
		r = a.as(t, appID, appKey, appSecret, http.MethodPost, "/events", `{"name":"e","data":"d","channel":"a"}`)
		require.Equal(t, http.StatusOK, r.code, r.body)
		require.Empty(t, r.header.Get("X-RateLimit-Limit"), "an app without limits")
	}
}

// TestChannelNameLimitPerApp: an app's maxChannelNameLength bounds the
// names its API calls may use, in either direction from the default 200.
func TestChannelNameLimitPerApp(t *testing.T) {
	t.Parallel()
	s := limitReplicas(t, 1)[0]
	r := s.as(t, rlID, rlKey, rlSecret, http.MethodPost, "/events", `{"name":"e","data":"d","channel":"abcdefghijk"}`)
	require.Equal(t, http.StatusBadRequest, r.code, r.body)
	require.Contains(t, r.body, "over the limit of 10")
	r = s.as(t, rlID, rlKey, rlSecret, http.MethodPost, "/events", `{"name":"e","data":"d","channel":"abcdefghij"}`)
	require.Equal(t, http.StatusOK, r.code, r.body)

	long := strings.Repeat("x", 250)
	r = s.as(t, longID, longKey, longSecret, http.MethodPost, "/events", `{"name":"e","data":"d","channel":"`+long+`"}`)
	require.Equal(t, http.StatusOK, r.code, r.body)
	r = s.as(t, longID, longKey, longSecret, http.MethodGet, "/channels/"+long, "")
	require.Equal(t, http.StatusOK, r.code, r.body)
	r = s.as(t, appID, appKey, appSecret, http.MethodPost, "/events", `{"name":"e","data":"d","channel":"`+long+`"}`)
	require.Equal(t, http.StatusBadRequest, r.code, r.body)
	require.Contains(t, r.body, "over the limit of 200")
}
