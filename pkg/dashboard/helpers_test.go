package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/httpapi"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// The tests serve the dashboard as the binary does, from an httpapi.App
// with --dashboard: its handlers answer from the real signed API over a
// real Redis.

const (
	appID     = "app-1"
	appKey    = "key-1"
	appSecret = "secret-1"
	offID     = "app-off"
)

// TestMain fails the package if goroutines outlive its tests.
func TestMain(m *testing.M) { redistest.Main(m) }

func testApps(t testing.TB) *apps.Registry {
	t.Helper()
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: appSecret, Enabled: true, Capacities: []apps.Capacity{{Prefix: "presence-room-", Capacity: 2}}},
		{ID: offID, Key: "key-off", Secret: "secret-off", Enabled: false},
	})
	require.NoError(t, err)
	return reg
}

type testServer struct {
	app  *httpapi.App
	apps *apps.Registry
	base string // http://127.0.0.1:port
}

// start runs an httpapi.App with cfg on loopback ports for the Redis in
// common, until the test ends, and checks that it stops cleanly.
func start(t *testing.T, common config.Common, cfg config.HTTPAPI) *testServer {
	t.Helper()
	common.AdminAddr = "127.0.0.1:0"
	common.Apps = testApps(t)
	cfg.Common, cfg.Addr = common, "127.0.0.1:0"
	a, err := httpapi.New(httpapi.Options{Config: cfg, Logger: logging.TestLogger(t), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return &testServer{app: a, apps: common.Apps, base: "http://" + a.Addr()}
}

// httpClient returns a client whose idle connections close with the test.
func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

type response struct {
	code   int
	body   string
	header http.Header
}

// do sends method path?rawQuery with body and returns the response.
func (s *testServer) do(t testing.TB, method, path, rawQuery string, body []byte) response {
	t.Helper()
	return s.doHeader(t, method, path, rawQuery, nil, body)
}

// doHeader is do with request headers; a "Host" entry sets the Host.
func (s *testServer) doHeader(t testing.TB, method, path, rawQuery string, header http.Header, body []byte) response {
	t.Helper()
	u := s.base + path
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	require.NoError(t, err)
	for k, vs := range header {
		if k == "Host" {
			req.Host = vs[0]
			continue
		}
		req.Header[k] = vs
	}
	resp, err := httpClient(t).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{code: resp.StatusCode, body: string(b), header: resp.Header}
}

// metrics is the App's /metrics page.
func (s *testServer) metrics(t testing.TB) string {
	t.Helper()
	resp, err := httpClient(t).Get("http://" + s.app.AdminAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// producer is a wsnode's counts.Recorder, stopped when the test ends.
type producer struct {
	rec   *counts.Recorder
	store *counts.Store
}

func newProducer(t *testing.T, rdb redis.UniversalClient, node string) *producer {
	t.Helper()
	rec := counts.NewRecorder(rdb, node, counts.RecorderOptions{Heartbeat: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rec.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return &producer{rec: rec, store: counts.NewStore(rdb, keyspace.Space{})}
}

// add applies deltas and waits until Redis shows want as app's occupied channels.
func (p *producer) add(t *testing.T, app string, deltas map[string]int64, want map[string]int64) {
	t.Helper()
	for ch, d := range deltas {
		p.rec.Add(app, ch, d)
	}
	var got map[string]int64
	require.Eventually(t, func() bool {
		var err error
		got, err = p.store.Channels(context.Background(), app, "")
		return err == nil && fmt.Sprint(got) == fmt.Sprint(want)
	}, 10*time.Second, 10*time.Millisecond, "counts did not reach %v (last %v)", want, got)
}
