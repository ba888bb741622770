package lifecycle

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/lifecycletest"
	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/portcap"
)

// capEvents counts what a capped server reports.
type capEvents struct {
	n [portcap.AcceptFailed + 1]atomic.Int64
}

func (e *capEvents) on(ev portcap.Event)          { e.n[ev].Add(1) }
func (e *capEvents) count(ev portcap.Event) int64 { return e.n[ev].Load() }
func (e *capEvents) counts() map[string]int64 { // for failure messages
	m := map[string]int64{}
	for ev := portcap.Refused; ev <= portcap.AcceptFailed; ev++ {
		m[ev.String()] = e.count(ev)
	}
	return m
}

type cappedServer struct {
	*Server
	events *capEvents
	log    *proctest.Buffer
}

// serveCapped runs a server capped at max connections on a loopback port
// until the test ends; new connections become closable for others after
// reclaimNew.
func serveCapped(t *testing.T, h http.Handler, to Timeouts, maxConns int, reclaimNew time.Duration) *cappedServer {
	t.Helper()
	cs := &cappedServer{events: &capEvents{}, log: &proctest.Buffer{}}
	s, err := ListenCapped("127.0.0.1:0", h, to, portcap.Config{Max: maxConns, Setting: "--max-connections",
		Logger: hclog.New(&hclog.LoggerOptions{Output: cs.log}), OnEvent: cs.events.on})
	require.NoError(t, err)
	s.capped.reclaimNewAfter = reclaimNew
	cs.Server = s
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		s.Shutdown(time.Second)
		require.NoError(t, <-done)
		require.Zero(t, s.Open(), "every connection gave its place back")
	})
	return cs
}

// requireOpen waits until the server counts n connections open.
func (s *cappedServer) requireOpen(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return s.Open() == n }, 10*time.Second, 5*time.Millisecond,
		"open connections did not come to %d (last %d; events %v)", n, s.Open(), s.events.counts())
}

// requireIdle waits until the server lists n keep-alive connections as
// idle: a client reads its answer a moment before the server marks the
// connection idle, and which connection idled first decides which goes.
func (s *cappedServer) requireIdle(t *testing.T, n int) {
	t.Helper()
	idle := func() int {
		l := s.capped
		l.mu.Lock()
		defer l.mu.Unlock()
		k := 0
		for c := l.idle.head; c != nil; c = c.next {
			k++
		}
		return k
	}
	require.Eventually(t, func() bool { return idle() == n }, 10*time.Second, time.Millisecond,
		"idle connections did not come to %d (last %d)", n, idle())
}

// rawConn is a client connection that sends raw requests.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path and returns the answer's status, Retry-After and body.
func (c *rawConn) get(t *testing.T, path string) (int, string, string) {
	t.Helper()
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	return c.read(t)
}

func (c *rawConn) read(t *testing.T) (int, string, string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(c.br, nil)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
}

// requireClosedByServer checks that the server closed c: reading it ends
// (EOF or a reset) within a few seconds.
func (c *rawConn) requireClosedByServer(t *testing.T, what string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := io.ReadAll(c.br)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "%s: still open", what)
}

// capMux answers GET / at once and GET /block once release is closed.
func capMux(release <-chan struct{}) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /block", func(w http.ResponseWriter, _ *http.Request) {
		<-release
		_, _ = io.WriteString(w, "released")
	})
	return mux
}

// TestCapRefusesWhenEveryConnectionIsBusy: at the cap, with a request in
// progress and a new connection within its grace, a new connection is
// answered 503 with Retry-After and closed, however many come; a
// connection its client closes gives its place back at once.
func TestCapRefusesWhenEveryConnectionIsBusy(t *testing.T) {
	release := make(chan struct{})
	s := serveCapped(t, capMux(release), Timeouts{}, 2, time.Hour)
	base := runtime.NumGoroutine()

	busy := dialRaw(t, s.Addr())
	_, err := io.WriteString(busy, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	quiet := dialRaw(t, s.Addr()) // sends nothing: new, within its grace
	s.requireOpen(t, 2)

	code, retry, body := dialRaw(t, s.Addr()).get(t, "/")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Equal(t, "1", retry)
	require.Contains(t, body, "--max-connections")

	// A flood past the cap: every connection is refused and closed, those
	// past the ones drained at once without their answer, perhaps.
	const flood = 3 * portcap.RefusingAtOnce
	for range flood {
		c := dialRaw(t, s.Addr())
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		c.requireClosedByServer(t, "a connection past the cap")
	}
	require.EqualValues(t, 1+flood, s.events.count(portcap.Refused))
	require.Zero(t, s.events.count(portcap.ClosedIdle)+s.events.count(portcap.ClosedNew), "busy connections are not closed for new ones")
	require.Equal(t, 2, s.Open())

	require.NoError(t, quiet.Close())
	s.requireOpen(t, 1)
	c := dialRaw(t, s.Addr())
	code, _, body = c.get(t, "/")
	require.Equal(t, http.StatusOK, code, body)

	close(release)
	code, _, body = busy.read(t)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "released", body)

	out := s.log.String()
	require.Equal(t, 1, strings.Count(out, "refusing connections"), "one warning for %d refusals:\n%s", 1+flood, out)
	require.Contains(t, out, "max_connections=2 refused=1")
	_ = busy.Close()
	_ = c.Close()
	s.requireOpen(t, 0)
	requireGoroutinesBack(t, base)
}

// TestCapClosesLongestIdleForNewConnection: at the cap, a new connection
// takes the place of the keep-alive connection idle longest, which is
// closed; the others keep being served.
func TestCapClosesLongestIdleForNewConnection(t *testing.T) {
	s := serveCapped(t, capMux(nil), Timeouts{}, 3, time.Hour)
	var idle [3]*rawConn
	for i := range idle {
		idle[i] = dialRaw(t, s.Addr())
		code, _, _ := idle[i].get(t, "/")
		require.Equal(t, http.StatusOK, code)
		s.requireIdle(t, i+1)
	}
	s.requireOpen(t, 3)

	fresh := dialRaw(t, s.Addr())
	code, _, _ := fresh.get(t, "/")
	require.Equal(t, http.StatusOK, code, "admitted at the cap")
	idle[0].requireClosedByServer(t, "the connection idle longest")
	s.requireIdle(t, 3)
	code, _, _ = idle[1].get(t, "/") // now idle[2] has waited longest
	require.Equal(t, http.StatusOK, code, "the others are kept")
	s.requireIdle(t, 3)

	code, _, _ = dialRaw(t, s.Addr()).get(t, "/")
	require.Equal(t, http.StatusOK, code)
	idle[2].requireClosedByServer(t, "the connection idle longest")
	code, _, _ = fresh.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	code, _, _ = idle[1].get(t, "/")
	require.Equal(t, http.StatusOK, code)

	require.EqualValues(t, 2, s.events.count(portcap.ClosedIdle), "events %v", s.events.counts())
	require.Zero(t, s.events.count(portcap.Refused))
	require.Equal(t, 3, s.Open())
	require.Equal(t, 1, strings.Count(s.log.String(), "closing the connections that waited longest"), s.log.String())
}

// TestCapClosesStalledNewConnections: a new connection that has sent no
// request past its grace may be closed for a new one too; of it and the
// idle keep-alive connections, the one waiting longest goes first.
func TestCapClosesStalledNewConnections(t *testing.T) {
	s := serveCapped(t, capMux(nil), Timeouts{}, 2, 0)
	kept := dialRaw(t, s.Addr())
	code, _, _ := kept.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	s.requireIdle(t, 1)
	stalled := dialRaw(t, s.Addr())
	s.requireOpen(t, 2)

	first := dialRaw(t, s.Addr())
	code, _, _ = first.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	kept.requireClosedByServer(t, "idle since before the stalled connection came")
	s.requireIdle(t, 1)
	code, _, _ = dialRaw(t, s.Addr()).get(t, "/")
	require.Equal(t, http.StatusOK, code)
	stalled.requireClosedByServer(t, "waiting since before the other idled")
	code, _, _ = first.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 1, s.events.count(portcap.ClosedIdle), "events %v", s.events.counts())
	require.EqualValues(t, 1, s.events.count(portcap.ClosedNew), "events %v", s.events.counts())
}

// TestCapHijackedConnectionHoldsItsPlaceUntilClosed: a hijacked connection
// is not the server's to close for a new one, and counts until its new
// owner closes it.
func TestCapHijackedConnectionHoldsItsPlaceUntilClosed(t *testing.T) {
	hijacked := make(chan net.Conn, 1)
	mux := capMux(nil)
	mux.HandleFunc("GET /hijack", func(w http.ResponseWriter, _ *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nhijacked")
		_ = brw.Flush()
		hijacked <- c
	})
	s := serveCapped(t, mux, Timeouts{}, 1, 0)
	code, _, body := dialRaw(t, s.Addr()).get(t, "/hijack")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "hijacked", body)
	c := <-hijacked
	require.Equal(t, 1, s.Open())

	code, _, _ = dialRaw(t, s.Addr()).get(t, "/")
	require.Equal(t, http.StatusServiceUnavailable, code, "a hijacked connection is not closed for a new one")
	require.NoError(t, c.Close())
	s.requireOpen(t, 0)
	code, _, _ = dialRaw(t, s.Addr()).get(t, "/")
	require.Equal(t, http.StatusOK, code)
}

// TestCapTimedOutConnectionsGiveTheirPlaceBack: connections the server's
// timeouts cut (idle keep-alive, a head that never comes, a body that
// never comes) free their places.
func TestCapTimedOutConnectionsGiveTheirPlaceBack(t *testing.T) {
	const cut = 300 * time.Millisecond
	mux := capMux(nil)
	mux.HandleFunc("POST /", func(_ http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	s := serveCapped(t, mux, Timeouts{Header: cut, Read: cut, Write: 2 * cut, Idle: cut}, 10, time.Hour)
	base := runtime.NumGoroutine()
	conns := lifecycletest.Idle(t, s.Addr(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 3)
	conns = append(conns, lifecycletest.SlowBody(t, s.Addr(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", "ab", 3)...)
	for range 3 {
		dialRaw(t, s.Addr()) // sends nothing
	}
	s.requireOpen(t, 9)
	lifecycletest.RequireCut(t, conns, cut, cut+3*time.Second)
	s.requireOpen(t, 0)
	requireGoroutinesBack(t, base)
}
