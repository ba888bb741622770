package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/lifecycletest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
)

// TestSlowClientsAreCut: keep-alive connections left idle after a request
// are closed within --idle-timeout; requests whose body stops after 4 of
// 1,000,000 announced bytes are answered 408 and closed within
// --read-timeout when signed, and refused from the head when not (the
// body unread but for a drain of drainGrace);
// meanwhile a Pusher client is served, and at the end the goroutines the
// connections held are released.
func TestSlowClientsAreCut(t *testing.T) {
	const idle, read, write = time.Second, 5 * time.Second, 7 * time.Second
	const slack = 3 * time.Second // a loaded CI machine under -race
	srv := redistest.New(t)
	s := startWith(t, config.Common{Redis: srv.URL()}, config.HTTPAPI{IdleTimeout: idle, ReadTimeout: read, WriteTimeout: write})
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

	// GET /up: unsigned, and the connection is kept (a refused /apps/
	// request closes its own).
	idlers := lifecycletest.Idle(t, addr, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n", 100)
	// Bodies announced at 1,000,000 bytes (and 1,000, which the server
	// would otherwise drain before reusing the connection); 4 arrive.
	path := "/apps/" + appID + "/events"
	head := func(query string, size int) string {
		return fmt.Sprintf("POST %s?%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, query, size)
	}
	body := bytes.Repeat([]byte("x"), 1_000_000)
	slowSigned := lifecycletest.SlowBody(t, addr, head(signed(http.MethodPost, path, nil, body, appKey, appSecret, time.Now()), len(body)), "xxxx", 100)
	var unsigned []*lifecycletest.Conn
	for _, q := range []string{"", "auth_key=" + appKey, signed(http.MethodPost, path, nil, body, appKey, "wrong", time.Now())} {
		for _, size := range []int{len(body), 1000} {
			unsigned = append(unsigned, lifecycletest.SlowBody(t, addr, head(q, size), "xxxx", 20)...)
		}
	}

	served()
	for _, code := range lifecycletest.RequireCut(t, unsigned, 0, drainGrace+time.Second) {
		require.Equal(t, http.StatusUnauthorized, code, "refused from the head, without waiting for the body")
	}
	for _, code := range lifecycletest.RequireCut(t, idlers, idle, idle+slack) {
		require.Zero(t, code, "nothing more is sent on an idle connection")
	}
	for _, code := range lifecycletest.RequireCut(t, slowSigned, read, read+slack) {
		require.Equal(t, http.StatusRequestTimeout, code)
	}
	served()
	legit.HTTPClient.Transport.(*http.Transport).CloseIdleConnections()
	var n int
	require.Eventually(t, func() bool { n = runtime.NumGoroutine(); return n <= base+5 }, 10*time.Second, 20*time.Millisecond,
		"goroutines did not come back to about %d (last %d)", base, n)
}
