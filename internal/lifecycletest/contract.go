package lifecycletest

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/headcount/headcount/internal/redistest"
)

// Service is lifecycle.Service (declared again: lifecycle's own tests
// import this package).
type Service interface {
	Run(ctx context.Context) error
	Stop()
}

// Subject is an app as its New returned it.
type Subject struct {
	Service
	// Addrs are the listeners New bound; the first one answers HTTP once
	// Run serves.
	Addrs []string
	// Redis is the client New built: closed once the app is stopped.
	Redis redis.UniversalClient
}

// Contract checks that the apps New builds keep lifecycle.Service's
// promises: Stop without Run frees the listeners, the Redis client and
// every goroutine, and may be repeated; Run after Stop returns nil at once;
// Stop during Run makes Run return nil and frees the same; a second Run
// fails. build makes a fresh app for each case (with a nil logger, which
// must work).
func Contract(t *testing.T, build func(t *testing.T) Subject) {
	t.Run("stop without run", func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		s := build(t)
		s.Stop()
		requireReleased(t, s, before)
		s.Stop()
		requireReturns(t, "Run after Stop", s.Run, func(err error) {
			require.NoError(t, err, "Run after Stop has nothing to serve")
		})
	})
	t.Run("stop during run", func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		s := build(t)
		errc := make(chan error, 1)
		go func() { errc <- s.Run(context.Background()) }()
		require.Eventually(t, func() bool { return answers(s.Addrs[0]) }, 10*time.Second, 10*time.Millisecond,
			"Run serves %s", s.Addrs[0])
		s.Stop()
		select {
		case err := <-errc:
			require.NoError(t, err, "a Stop is a clean stop")
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after Stop")
		}
		s.Stop()
		requireReleased(t, s, before)
		requireReturns(t, "a second Run", s.Run, func(err error) {
			require.Error(t, err, "Run runs once")
		})
	})
	t.Run("cancel during run", func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		s := build(t)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.Run(ctx) }()
		require.Eventually(t, func() bool { return answers(s.Addrs[0]) }, 10*time.Second, 10*time.Millisecond)
		cancel()
		select {
		case err := <-errc:
			require.NoError(t, err, "ending ctx is a clean stop")
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after its ctx ended")
		}
		requireReleased(t, s, before)
		s.Stop() // after Run returned: nothing left to do
		s.Stop()
	})
}

// requireReleased checks that s holds no listener, Redis client or
// goroutine any more.
func requireReleased(t *testing.T, s Subject, before goleak.Option) {
	t.Helper()
	for _, addr := range s.Addrs {
		ln, err := net.Listen("tcp", addr)
		require.NoError(t, err, "the listener on %s is closed", addr)
		require.NoError(t, ln.Close())
	}
	if s.Redis != nil {
		require.ErrorIs(t, s.Redis.Ping(context.Background()).Err(), redis.ErrClosed, "the Redis client is closed")
	}
	goleak.VerifyNone(t, append([]goleak.Option{before}, redistest.LongLived...)...)
}

// requireReturns calls run with a context that never ends and checks its
// result with check; run must return within a few seconds.
func requireReturns(t *testing.T, what string, run func(context.Context) error, check func(error)) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- run(context.Background()) }()
	select {
	case err := <-errc:
		check(err)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not return at once", what)
	}
}

// answers reports whether an HTTP server answers on addr (any status).
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line != ""
}
