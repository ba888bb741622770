package lifecycle

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/headcount/headcount/internal/lifecycletest"
)

// TestMain fails the package if any goroutine (a server's, a connection's)
// outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve runs a Server for h on a loopback port until the test ends.
func serve(t *testing.T, h http.Handler, to Timeouts) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", h, to)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Shutdown(time.Second)
		require.NoError(t, <-done)
	})
	return s
}

// client is a keep-alive HTTP client closed with the test.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// requireGoroutinesBack waits until the goroutine count is back within a
// few of base: every cut connection has released its goroutine.
func requireGoroutinesBack(t *testing.T, base int) {
	t.Helper()
	var n int
	require.Eventually(t, func() bool { n = runtime.NumGoroutine(); return n <= base+3 }, 10*time.Second, 20*time.Millisecond,
		"goroutines did not come back to about %d (last %d)", base, n)
}

// TestListenCutsIdleSlowAndStuckClients: a server from Listen closes
// keep-alive connections idle for Timeouts.Idle, requests whose body has
// not arrived within Timeouts.Read and responses the client does not read
// within Timeouts.Write, while a well-behaved client is served throughout.
func TestListenCutsIdleSlowAndStuckClients(t *testing.T) {
	const idle, read, write = 600 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond
	const slack = 3 * time.Second // a loaded CI machine under -race
	writeErr := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			http.Error(w, "body too slow", http.StatusRequestTimeout)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, _ *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range 1 << 12 { // 256 MiB: far more than socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	})
	s := serve(t, mux, Timeouts{Read: read, Write: write, Idle: idle})
	addr := s.Addr()
	legit := client(t)
	get := func() {
		t.Helper()
		resp, err := legit.Get("http://" + addr + "/")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, "ok", string(b))
	}
	get()
	legit.Transport.(*http.Transport).CloseIdleConnections()
	base := runtime.NumGoroutine()

	idlers := lifecycletest.Idle(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 100)
	slow := lifecycletest.SlowBody(t, addr, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n", "abcd", 100)
	// A client that asks for a large answer and never reads it.
	stuck, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer stuck.Close()
	_, err = io.WriteString(stuck, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	stuckAt := time.Now()
	require.Eventually(t, func() bool { return runtime.NumGoroutine() > base+100 }, 10*time.Second, 10*time.Millisecond,
		"each open connection holds a server goroutine")

	// Served meanwhile, on fresh connections and on a reused one.
	get()
	resp, err := legit.Post("http://"+addr+"/echo", "text/plain", strings.NewReader("hello"))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, "hello", string(b))

	lifecycletest.RequireCut(t, idlers, idle, idle+slack)
	for i, code := range lifecycletest.RequireCut(t, slow, read, read+slack) {
		require.Equal(t, http.StatusRequestTimeout, code, "slow body %d: the handler's read failed with the deadline", i)
	}
	select {
	case err := <-writeErr:
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the unread answer's write failed with the deadline")
		require.Less(t, time.Since(stuckAt), write+slack)
	case <-time.After(write + slack):
		t.Fatalf("the answer nobody reads is still being written %v later", write+slack)
	}
	legit.Transport.(*http.Transport).CloseIdleConnections()
	requireGoroutinesBack(t, base)
}

// TestAdminServerTimeouts: the admin servers cut idle connections too,
// and the profiler runs longer than their write timeout (it moves its own
// deadline by the duration asked for).
func TestAdminServerTimeouts(t *testing.T) {
	require.Greater(t, AdminTimeouts.Idle, time.Minute, "a scraper polling every minute keeps its connection")
	require.Equal(t, AdminTimeouts, Timeouts{}.withDefaults(), "a zero Timeouts is the admin one")
	require.Equal(t, 50*time.Millisecond, Timeouts{Read: 50 * time.Millisecond}.withDefaults().Header, "the header timeout stays within the read timeout")

	mux := AdminMux(prometheus.NewRegistry(), func() bool { return true })
	const idle, write = 500 * time.Millisecond, 300 * time.Millisecond
	s := serve(t, mux, Timeouts{Idle: idle, Write: write})
	base := runtime.NumGoroutine()
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		conns := lifecycletest.Idle(t, s.Addr(), "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n", 30)
		lifecycletest.RequireCut(t, conns, idle, idle+3*time.Second)
	}
	requireGoroutinesBack(t, base)

	resp, err := client(t).Get("http://" + s.Addr() + "/debug/pprof/profile?seconds=1")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err, "a profile longer than the write timeout is not cut")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NotEmpty(t, b)
}
