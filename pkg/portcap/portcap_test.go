package portcap

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/headcount/headcount/internal/proctest"
)

const (
	wait = 10 * time.Second
	tick = 10 * time.Millisecond
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events counts what a Port reports.
type events struct {
	n [AcceptFailed + 1]atomic.Int64
}

func (e *events) on(ev Event)          { e.n[ev].Add(1) }
func (e *events) count(ev Event) int64 { return e.n[ev].Load() }

func newPort(t *testing.T, maxConns int) (*Port, *events, *proctest.Buffer) {
	t.Helper()
	ev, log := &events{}, &proctest.Buffer{}
	p := New(Config{Max: maxConns, Setting: "--max-things", Refusing: "refusing connections: test",
		Logger: hclog.New(&hclog.LoggerOptions{Output: log}), OnEvent: ev.on})
	t.Cleanup(func() { p.Close(); p.Wait() })
	return p, ev, log
}

func TestNextBackoff(t *testing.T) {
	var got []time.Duration
	for d := time.Duration(0); len(got) < 10; {
		d = NextBackoff(d)
		got = append(got, d)
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second}, got)
}

// failingListener fails its first fails accepts with EMFILE (every one
// while always is set), then accepts from the listener it wraps.
type failingListener struct {
	net.Listener
	fails  atomic.Int32
	always atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.always.Load() || l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func listen(t *testing.T, fails int32) *failingListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	fl := &failingListener{Listener: ln}
	fl.fails.Store(fails)
	return fl
}

// TestAcceptBacksOff: failed accepts are retried after a backoff (5, 10,
// 20, 40 and 80 ms), each reported, logged once; then Accept returns the
// connection.
func TestAcceptBacksOff(t *testing.T) {
	p, ev, log := newPort(t, 0)
	const fails = 5
	ln := listen(t, fails)
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	got, err := p.Accept(ln)
	require.NoError(t, err)
	require.NoError(t, got.Close())
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "the retries waited")
	require.EqualValues(t, fails, ev.count(AcceptFailed))
	require.Equal(t, 1, strings.Count(log.String(), "accepting a connection failed; retrying"), log.String())
	require.Contains(t, log.String(), "too many open files")
}

// TestAcceptEndsOnClose: an Accept backing off returns once the Port is
// closed, and at once from a closed listener.
func TestAcceptEndsOnClose(t *testing.T) {
	p, ev, _ := newPort(t, 0)
	ln := listen(t, 0)
	ln.always.Store(true)
	done := make(chan error, 1)
	go func() { _, err := p.Accept(ln); done <- err }()
	require.Eventually(t, func() bool { return ev.count(AcceptFailed) > 0 }, wait, tick)
	p.Close()
	require.ErrorIs(t, <-done, net.ErrClosed)

	q, _, _ := newPort(t, 0)
	require.NoError(t, ln.Close())
	ln.always.Store(false)
	_, err := q.Accept(ln)
	require.ErrorIs(t, err, net.ErrClosed)
}

// TestRefuse: every refused client reads the whole 503, even one that
// sent its request first; at most RefusingAtOnce linger, and Close ends
// them.
func TestRefuse(t *testing.T) {
	p, ev, log := newPort(t, 1)
	require.True(t, p.Full(1))
	require.False(t, p.Full(0))
	ln := listen(t, 0)
	const refused = RefusingAtOnce + 4
	var clients []net.Conn
	for range refused {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close() // held open: a lingering refusal waits for it
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		s, err := p.Accept(ln)
		require.NoError(t, err)
		p.Refuse(s)
		clients = append(clients, c)
	}
	for i, c := range clients {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, "client %d", i)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.True(t, resp.Close)
		require.Equal(t, "this server holds as many connections as it may (--max-things); try again\n", string(b))
	}
	p.mu.Lock()
	require.Len(t, p.lingering, RefusingAtOnce, "the others are closed at once")
	p.mu.Unlock()
	require.EqualValues(t, refused, ev.count(Refused))
	require.Equal(t, 1, strings.Count(log.String(), "refusing connections: test"), log.String())
	require.Contains(t, log.String(), "max_things=1")
	p.Close()
	p.Wait() // the lingering ones end with Close, not their clients
}

// TestConnCountedUntilFirstClose: an admitted Conn holds its place until
// its first Close, which calls released once.
func TestConnCountedUntilFirstClose(t *testing.T) {
	p, _, _ := newPort(t, 2)
	a, b := net.Pipe()
	defer b.Close()
	var released atomic.Int32
	c := p.Admit(a, func() { released.Add(1) })
	require.EqualValues(t, 1, p.Open())
	require.False(t, c.Closed())
	require.NoError(t, c.Close())
	_ = c.Close()
	require.True(t, c.Closed())
	require.Zero(t, p.Open())
	require.EqualValues(t, 1, released.Load())
}

func TestClip(t *testing.T) {
	require.Equal(t, `"a\n"`, Clip("a\n"))
	require.Equal(t, `"`+strings.Repeat("x", 64)+`..."`, Clip(strings.Repeat("x", 65)))
}
