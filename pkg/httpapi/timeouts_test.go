package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/redisx/redistest"
	"github.com/headcount/headcount/pkg/run/runtest"
)

// startConfigured runs an App on loopback ports with cfg's settings until
// the test ends (Addr, AdminAddr and Apps are the tests').
func startConfigured(t *testing.T, cfg config.HTTPAPI) *testServer {
	t.Helper()
	cfg.Addr, cfg.AdminAddr, cfg.Apps = "127.0.0.1:0", "127.0.0.1:0", testApps(t)
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

// TestSlowClientsAreCut: keep-alive connections left idle after a request
// and requests whose body stops after 4 of 1,000,000 announced bytes are
// closed by the server within --idle-timeout and --read-timeout, while a
// Pusher client is served; their goroutines are released.
func TestSlowClientsAreCut(t *testing.T) {
	const idle, read, write = time.Second, time.Second, 3 * time.Second
	const slack = 3 * time.Second // a loaded CI machine under -race
	srv := redistest.New(t)
	s := startConfigured(t, config.HTTPAPI{Common: config.Common{Redis: srv.URL()}, IdleTimeout: idle, ReadTimeout: read, WriteTimeout: write})
	addr := s.app.Addr()
	legit := s.pusherClient(t, appSecret)
	served := func() {
		t.Helper()
		require.NoError(t, legit.Trigger("public-b", "greet", "hello"))
		_, err := legit.Channels(pusher.ChannelsParams{})
		require.NoError(t, err)
	}
	served()
	legit.HTTPClient.Transport.(*http.Transport).CloseIdleConnections()
	var base int
	require.Eventually(t, func() bool { base = runtime.NumGoroutine(); return base < 100 }, 10*time.Second, 10*time.Millisecond)

	// An unsigned GET: any app id will do.
	idlers := runtest.Idle(t, addr, "GET /apps/"+appID+"/channels HTTP/1.1\r\nHost: x\r\n\r\n", 100)
	// A body announced at 1,000,000 bytes; 4 arrive. Signed, so the server
	// reads the body; and with no credentials at all.
	body := bytes.Repeat([]byte("x"), 1_000_000)
	path := "/apps/" + appID + "/events"
	head := func(query string) string {
		return fmt.Sprintf("POST %s?%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, query, len(body))
	}
	slowSigned := runtest.SlowBody(t, addr, head(signed(http.MethodPost, path, nil, body, appKey, appSecret, time.Now())), "xxxx", 100)
	slowUnsigned := runtest.SlowBody(t, addr, head("auth_key="+appKey), "xxxx", 100)

	served()
	for _, c := range runtest.RequireCut(t, idlers, idle, idle+slack) {
		require.Zero(t, c, "nothing more is sent on an idle connection")
	}
	runtest.RequireCut(t, slowSigned, read, read+slack)
	runtest.RequireCut(t, slowUnsigned, read, read+slack)
	served()
	legit.HTTPClient.Transport.(*http.Transport).CloseIdleConnections()
	var n int
	require.Eventually(t, func() bool { n = runtime.NumGoroutine(); return n <= base+5 }, 10*time.Second, 20*time.Millisecond,
		"goroutines did not come back to about %d (last %d)", base, n)
}
