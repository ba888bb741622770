package counts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/redisx/redistest"
)

// TestLivenessSeesClosedConnections: Store.Liveness reports a node live
// while its Liveness runs and dead once it stops (its connection closed),
// and trusts the answer only once the canary has held for trustAfter. On
// Cluster the check goes to the liveness shard (SHARDNUMSUB).
func TestLivenessSeesClosedConnections(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb)
		run := func(l *Liveness) context.CancelFunc {
			lctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); l.Run(lctx) }()
			t.Cleanup(func() { cancel(); <-done })
			require.Eventually(t, func() bool { return !l.Since().IsZero() }, 10*time.Second, 5*time.Millisecond)
			return func() { cancel(); <-done }
		}
		canary := NewCanary(rdb, "c1", time.Second, logging.TestLogger(t))
		run(canary)
		stopA := run(NewNodeLiveness(rdb, "a", time.Second, logging.TestLogger(t)))
		run(NewNodeLiveness(rdb, "b", time.Second, logging.TestLogger(t)))

		live, dead, trusted, err := store.Liveness(ctx, canary, time.Hour, []string{"a", "b", "never"})
		require.NoError(t, err)
		require.False(t, trusted, "a canary younger than trustAfter is not trusted")
		require.ElementsMatch(t, []string{"a", "b"}, live)
		require.Equal(t, []string{"never"}, dead)

		stopA()
		require.Eventually(t, func() bool {
			live, dead, trusted, err = store.Liveness(ctx, canary, 0, []string{"a", "b"})
			return err == nil && trusted && len(dead) == 1 && dead[0] == "a"
		}, 5*time.Second, 10*time.Millisecond)
		require.Equal(t, []string{"b"}, live)
	})
}

// TestLivenessKeepsASilentConnection: cut off from Redis (every byte
// dropped, nothing closed), a node's liveness connection goes silent; the
// node keeps it open while it retries, so Redis, which never saw it close,
// keeps the subscription and the cleaner leaves the node to its
// heartbeat. After the heal it subscribes again on a new connection.
func TestLivenessKeepsASilentConnection(t *testing.T) {
	srv := redistest.New(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	opts, err := redis.ParseURL(proxy.URL())
	require.NoError(t, err)
	behind := redis.NewClient(opts)
	t.Cleanup(func() { _ = behind.Close() })
	direct := srv.Client(t)
	ctx := context.Background()
	const ping = 50 * time.Millisecond
	l := NewNodeLiveness(behind, "cut", ping, logging.TestLogger(t))
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return !l.Since().IsZero() }, 5*time.Second, 5*time.Millisecond)
	first := l.Since()

	subs := func() int64 {
		n, err := direct.PubSubNumSub(ctx, nodeLivenessChannel("cut")).Result()
		require.NoError(t, err)
		return n[nodeLivenessChannel("cut")]
	}
	proxy.Partition()
	require.Eventually(t, func() bool { return l.Since().IsZero() }, 5*time.Second, 5*time.Millisecond, "the silence went unnoticed")
	for range 10 {
		require.EqualValues(t, 1, subs(), "the subscription went while the node was only cut off")
		time.Sleep(2 * ping)
	}
	proxy.Heal()
	require.Eventually(t, func() bool { return l.Since().After(first) }, 5*time.Second, 5*time.Millisecond, "no new subscription after the heal")
	require.Eventually(t, func() bool { return subs() == 1 }, 5*time.Second, 5*time.Millisecond)
}
