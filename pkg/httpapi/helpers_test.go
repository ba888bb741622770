package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
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
		{ID: appID, Key: appKey, Secret: appSecret, Enabled: true, Capacities: []apps.Capacity{{Prefix: "presence-room-", Capacity: 2}}},
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

// httpClient returns a client whose idle connections close with the test.
func httpClient(t testing.TB) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// pusherClient is the real pusher-http-go client pointed at s.
func (s *testServer) pusherClient(t testing.TB, secret string) *pusher.Client {
	return &pusher.Client{AppID: appID, Key: appKey, Secret: secret, Host: strings.TrimPrefix(s.base, "http://"), HTTPClient: httpClient(t)}
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
