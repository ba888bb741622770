package dashboard_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/httpapi"
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
	r := apitest.Do(t, s.base, method, path, rawQuery, header, body)
	return response{code: r.Code, body: r.Body, header: r.Header}
}
