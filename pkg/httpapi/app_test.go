package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
)

func adminGet(t *testing.T, a *App, path string) (int, string) {
	t.Helper()
	resp, err := apitest.Client(t).Get("http://" + a.AdminAddr() + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestReadinessFollowsRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := startServer(t, config.Common{Redis: srv.URL()})
	ready := func(want int) func() bool {
		return func() bool {
			code, _ := adminGet(t, s.app, "/readyz")
			// The public port's /up, for load balancers, says the same.
			up := s.get(t, "/up", nil)
			// And headcount_httpapi_ready, for alerts.
			r, err := metricstest.Read("http://"+s.app.AdminAddr()+"/metrics", "headcount_httpapi_ready")
			return code == want && up.code == want && err == nil && r == map[bool]float64{true: 1}[want == 200]
		}
	}
	require.Eventually(t, ready(200), 10*time.Second, 10*time.Millisecond)
	code, _ := adminGet(t, s.app, "/healthz")
	require.Equal(t, 200, code)

	srv.KillAndHold(t)
	require.Eventually(t, ready(503), 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0.0, testutil.ToFloat64(s.app.metrics.redisUp))
	// A read while Redis is down is a 503, never a made-up count.
	r := s.get(t, "/apps/"+appID+"/channels/private-a", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.code)
	require.Contains(t, r.body, "Counts are unavailable")
	require.Positive(t, testutil.ToFloat64(s.app.metrics.redisErrors))
	code, _ = adminGet(t, s.app, "/healthz")
	require.Equal(t, 200, code, "liveness does not depend on Redis")

	srv.Restart(t)
	require.Eventually(t, ready(200), 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1.0, testutil.ToFloat64(s.app.metrics.redisUp))
	r = s.get(t, "/apps/"+appID+"/channels/private-a", nil)
	require.Equal(t, `{"occupied":false}`+"\n", r.body)

	code, body := adminGet(t, s.app, "/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, `headcount_httpapi_requests_total{code="503",route="GET /apps/{app_id}/channels/{channel_name}"} 1`)
	require.Contains(t, body, "headcount_httpapi_request_duration_seconds_bucket")
}

func TestRunStopsOnContextAndReleasesPorts(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	a, _ := newTestApp(t, config.Common{Redis: srv.URL()})
	addr, admin := a.Addr(), a.AdminAddr()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	require.Eventually(t, func() bool { code, _ := adminGet(t, a, "/readyz"); return code == 200 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	requireFree(t, addr)
	requireFree(t, admin)
	require.ErrorContains(t, a.Run(context.Background()), "Run called twice")
	a.Stop() // idempotent, also after Run
}

func TestStopEndsRun(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	a, _ := newTestApp(t, config.Common{Redis: srv.URL()})
	errc := make(chan error, 1)
	go func() { errc <- a.Run(context.Background()) }()
	a.Stop()
	a.Stop()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
}

func TestStopWithoutRunReleasesPorts(t *testing.T) {
	t.Parallel()
	// Ports below the ephemeral range: one the kernel handed out would, once
	// freed, be free for any parallel test's next connection to take.
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	admin := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	cfg := config.HTTPAPI{Common: config.Common{Redis: "redis://127.0.0.1:1/0", AdminAddr: admin, Apps: testApps(t)}, Addr: addr}
	a, err := New(Options{Config: cfg, Logger: logging.TestLogger(t)})
	require.NoError(t, err)
	require.Equal(t, addr, a.Addr())
	a.Stop()
	requireFree(t, addr)
	requireFree(t, admin)
	require.NoError(t, a.Run(context.Background()), "Run after Stop has nothing to do")
}

func TestNewFailsCleanly(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	apiAddr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	cfg := config.HTTPAPI{Common: config.Common{Redis: "redis://127.0.0.1:1/0", AdminAddr: busy.Addr().String(), Apps: testApps(t)}, Addr: apiAddr}
	_, err = New(Options{Config: cfg})
	require.ErrorContains(t, err, "--admin-addr")
	requireFree(t, apiAddr) // the API listener bound before the failure was released

	cfg.Apps = nil
	_, err = New(Options{Config: cfg})
	require.ErrorContains(t, err, "no apps configured")
}

func TestNoAdminServer(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	cfg := config.HTTPAPI{Common: config.Common{Redis: srv.URL(), Apps: testApps(t)}, Addr: "127.0.0.1:0"}
	a, err := New(Options{Config: cfg})
	require.NoError(t, err)
	require.Empty(t, a.AdminAddr())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	s := &testServer{app: a, base: "http://" + a.Addr()}
	r := s.get(t, "/apps/"+appID+"/channels", nil)
	require.Equal(t, `{"channels":{}}`+"\n", r.body)
	cancel()
	require.NoError(t, <-errc)
}

func requireFree(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "%s is still bound", addr)
	require.NoError(t, l.Close())
}

// FuzzAPI sends arbitrary requests, correctly signed so that they get past
// the signature check, through the real handler on a real Redis. The server
// must never fail (500) nor panic, and every 200 must be JSON.
func FuzzAPI(f *testing.F) {
	f.Add("GET", "channels", "filter_by_prefix=presence-&info=user_count", []byte(nil))
	f.Add("GET", "channels/private-a", "info=subscription_count,user_count", []byte(nil))
	f.Add("GET", "channels/%23server-to-user-1", "info=cache", []byte("{}"))
	f.Add("POST", "channels/x;y", "a=%41&A=b", []byte("x"))
	f.Add("GET", "channels/"+strings.Repeat("a", 300), "", []byte(nil))
	f.Add("GET", "../../apps/app-1/channels", "", []byte(nil))
	srv := redistest.New(f)
	// No test logger: the fuzz target runs on other Ts than f.
	cfg := config.HTTPAPI{Common: config.Common{Redis: srv.URL(), Apps: testApps(f)}, Addr: "127.0.0.1:0"}
	a, err := New(Options{Config: cfg})
	require.NoError(f, err)
	f.Cleanup(a.Stop)
	h := a.handler()
	f.Fuzz(func(t *testing.T, method, rest, rawQuery string, body []byte) {
		if method == "" || strings.ContainsFunc(method, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			return
		}
		path, err := url.PathUnescape("/apps/" + appID + "/" + rest)
		if err != nil {
			return
		}
		query, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		own := url.Values{}
		for k, v := range query {
			lk := strings.ToLower(k)
			if !strings.HasPrefix(lk, "auth_") && lk != "body_md5" && own.Get(lk) == "" {
				own[lk] = v[:1]
			}
		}
		req := &http.Request{
			Method: method,
			URL:    &url.URL{Path: path, RawQuery: signed(method, path, own, body, appKey, appSecret, time.Now())},
			Header: http.Header{},
			Body:   io.NopCloser(strings.NewReader(string(body))),
		}
		req = req.WithContext(context.Background())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s %q?%s: %d %s", method, path, req.URL.RawQuery, rec.Code, rec.Body.String())
		}
		if rec.Code == 200 && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: 200 with a body that is not JSON: %q", method, path, rec.Body.String())
		}
	})
}

// TestDashboardHostsIncludeAddr: the host of --addr is one of the names the
// dashboard answers to, besides --dashboard-hosts.
func TestDashboardHostsIncludeAddr(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"dash.example.com.", "Ops.Example"},
		dashboardHosts(config.HTTPAPI{Addr: "Ops.Example:8080", DashboardHosts: "dash.example.com."}))
	require.Empty(t, dashboardHosts(config.HTTPAPI{Addr: ":8080"}))
}
