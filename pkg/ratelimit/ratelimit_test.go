package ratelimit_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/ratelimit"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// replicas returns n limiters on their own clients of one Redis, as n
// httpapi replicas have, sharing one metrics registry.
func replicas(t *testing.T, n int, window time.Duration) ([]*ratelimit.Limiter, *ratelimit.Metrics) {
	t.Helper()
	srv := redistest.New(t)
	m := ratelimit.NewMetrics(prometheus.NewRegistry())
	ks := keyspace.New(strings.ReplaceAll(t.Name(), "/", "-"))
	out := make([]*ratelimit.Limiter, n)
	for i := range out {
		out[i] = ratelimit.New(srv.Client(t), ratelimit.Options{Keyspace: ks, Metrics: m, Logger: logging.TestLogger(t), Window: window})
	}
	return out, m
}

// TestReplicasShareTheBudget: two replicas taking in turn share one
// budget; a refusal spends nothing; other apps and kinds have their own.
func TestReplicasShareTheBudget(t *testing.T) {
	ls, m := replicas(t, 2, time.Minute) // a window the test cannot outlive
	ctx := context.Background()
	for i := range 10 {
		r := ls[i%2].Take(ctx, "a", ratelimit.BackendEvents, 10, 1)
		require.True(t, r.Allowed, "take %d", i)
		require.Equal(t, 9-i, r.Remaining)
		require.NoError(t, r.Err)
	}
	r := ls[0].Take(ctx, "a", ratelimit.BackendEvents, 10, 1)
	require.False(t, r.Allowed)
	require.Zero(t, r.Remaining)
	require.Greater(t, r.Reset, 50*time.Second)
	require.False(t, ls[1].Take(ctx, "a", ratelimit.BackendEvents, 10, 1).Allowed)
	require.Equal(t, 2.0, testutil.ToFloat64(m.RejectedCounter("a", ratelimit.BackendEvents)))

	require.True(t, ls[1].Take(ctx, "b", ratelimit.BackendEvents, 10, 10).Allowed, "another app")
	require.True(t, ls[1].Take(ctx, "a", ratelimit.ReadRequests, 10, 1).Allowed, "another kind")

	// A refused take spends nothing: 8, then 5 refused, then 2 fits.
	require.True(t, ls[0].Take(ctx, "c", ratelimit.BackendEvents, 10, 8).Allowed)
	require.False(t, ls[1].Take(ctx, "c", ratelimit.BackendEvents, 10, 5).Allowed)
	require.True(t, ls[0].Take(ctx, "c", ratelimit.BackendEvents, 10, 2).Allowed)
	// More points than the limit never fit.
	require.False(t, ls[0].Take(ctx, "d", ratelimit.BackendEvents, 10, 11).Allowed)
}

// TestConcurrentTakesNeverOverspend: many takes at once from two
// replicas get exactly the limit through.
func TestConcurrentTakesNeverOverspend(t *testing.T) {
	ls, _ := replicas(t, 2, time.Minute)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ls[i%2].Take(context.Background(), "a", ratelimit.ReadRequests, 30, 1).Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(30), allowed.Load())
}

// TestWindowEnds: with the real one-second window, a refused caller is
// let in again once the window ends, and never waits longer than it.
func TestWindowEnds(t *testing.T) {
	ls, _ := replicas(t, 1, 0)
	ctx := context.Background()
	require.True(t, ls[0].Take(ctx, "a", ratelimit.BackendEvents, 1, 1).Allowed)
	r := ls[0].Take(ctx, "a", ratelimit.BackendEvents, 1, 1)
	if r.Allowed { // the window ended between the two takes
		r = ls[0].Take(ctx, "a", ratelimit.BackendEvents, 1, 1)
	}
	require.False(t, r.Allowed)
	require.LessOrEqual(t, r.Reset, ratelimit.Window)
	require.Eventually(t, func() bool { return ls[0].Take(ctx, "a", ratelimit.BackendEvents, 1, 1).Allowed },
		3*ratelimit.Window, 20*time.Millisecond)
}

// TestNoLimitAndFailOpen: no limit never asks Redis; a Redis that cannot
// answer lets the request through, counted as an error.
func TestNoLimitAndFailOpen(t *testing.T) {
	m := ratelimit.NewMetrics(prometheus.NewRegistry())
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	l := ratelimit.New(dead, ratelimit.Options{Metrics: m, Logger: logging.TestLogger(t)})
	for _, limit := range []int{0, -1} {
		r := l.Take(context.Background(), "a", ratelimit.BackendEvents, limit, 5)
		require.True(t, r.Allowed)
		require.NoError(t, r.Err)
	}
	r := l.Take(context.Background(), "a", ratelimit.BackendEvents, 10, 1)
	require.True(t, r.Allowed, "fail open")
	require.Error(t, r.Err)
	require.Equal(t, 1.0, testutil.ToFloat64(m.ErrorsCounter(ratelimit.BackendEvents)))
}
