package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
)

const (
	appID     = "app-1"
	appKey    = "key-1"
	appSecret = "secret-1"
	offID     = "app-off"
	offKey    = "key-off"
	offSecret = "secret-off"
)

// TestMain fails the package if goroutines outlive its tests
// (redistest.Main). Re-executed by a test with HTTPAPI_TEST_APP=1, it runs
// the app instead, as cmd/httpapi does (runApp).
func TestMain(m *testing.M) {
	if os.Getenv("HTTPAPI_TEST_APP") == "1" {
		os.Exit(runApp())
	}
	redistest.Main(m)
}

func testApps(t testing.TB) *apps.Registry {
	t.Helper()
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: appSecret, Enabled: true, Capacities: []apps.Capacity{{Prefix: "presence-room-", Capacity: 2}},
			History: []apps.History{{Prefix: "chat-", Events: 3, Seconds: 600}}},
		{ID: offID, Key: offKey, Secret: offSecret, Enabled: false},
	})
	require.NoError(t, err)
	return reg
}

type testServer struct {
	app  *App
	base string // http://127.0.0.1:port
	reg  *prometheus.Registry
}

// newTestApp builds an App on loopback ports for the Redis in common.
func newTestApp(t testing.TB, common config.Common) (*App, *prometheus.Registry) {
	t.Helper()
	common.AdminAddr = "127.0.0.1:0"
	common.Apps = testApps(t)
	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: config.HTTPAPI{Common: common, Addr: "127.0.0.1:0"}, Logger: logging.TestLogger(t), Registry: reg})
	require.NoError(t, err)
	return a, reg
}

// eachRedis runs f on a single Redis and on a 3-master Cluster, with the
// Common that points at it.
func eachRedis(t *testing.T, f func(t *testing.T, common config.Common)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		var common config.Common
		if b.Cluster != nil {
			common.RedisCluster = b.Cluster.Seeds()
		} else {
			common.Redis = b.Single.URL()
		}
		f(t, common)
	})
}

// startServer runs an App until the test ends and checks that it stops cleanly.
func startServer(t *testing.T, common config.Common) *testServer {
	t.Helper()
	a, reg := newTestApp(t, common)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return &testServer{app: a, base: "http://" + a.Addr(), reg: reg}
}

// pusherClient is the real pusher-http-go client pointed at s.
func (s *testServer) pusherClient(t testing.TB, secret string) *pusher.Client {
	return &pusher.Client{AppID: appID, Key: appKey, Secret: secret, Host: strings.TrimPrefix(s.base, "http://"), HTTPClient: apitest.Client(t)}
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

// signed returns the encoded query of a request signed as a Pusher client
// would sign it.
func signed(method, path string, query url.Values, body []byte, key, secret string, now time.Time) string {
	return auth.SignRequest(method, path, query, body, key, secret, now).Encode()
}

// get sends a GET of the (unescaped) path signed with app-1's credentials.
func (s *testServer) get(t testing.TB, path string, query url.Values) response {
	t.Helper()
	escaped := (&url.URL{Path: path}).EscapedPath() // '#' must not start a fragment
	return s.do(t, http.MethodGet, escaped, signed(http.MethodGet, path, query, nil, appKey, appSecret, time.Now()), nil)
}
