package counts

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/logging"
)

// TestLivenessSeesClosedConnections: Store.Liveness reports a node live
// while its Liveness runs and dead once it stops (its connection closed),
// and trusts the answer only once the canary has held for trustAfter. On
// Cluster the check goes to the liveness shard (SHARDNUMSUB).
func TestLivenessSeesClosedConnections(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		run := func(l *Liveness) context.CancelFunc {
			lctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); l.Run(lctx) }()
			t.Cleanup(func() { cancel(); <-done })
			require.Eventually(t, func() bool { return !l.Since().IsZero() }, 10*time.Second, 5*time.Millisecond)
			return func() { cancel(); <-done }
		}
		canary := NewCanary(rdb, testKeys.ks, "c1", time.Second, logging.TestLogger(t))
		run(canary)
		stopA := run(NewNodeLiveness(rdb, testKeys.ks, "a", time.Second, logging.TestLogger(t)))
		run(NewNodeLiveness(rdb, testKeys.ks, "b", time.Second, logging.TestLogger(t)))

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
	t.Parallel()
	srv := redistest.New(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	opts, err := redis.ParseURL(proxy.URL())
	require.NoError(t, err)
	behind := redis.NewClient(opts)
	t.Cleanup(func() { _ = behind.Close() })
	direct := srv.Client(t)
	ctx := context.Background()
	const ping = 50 * time.Millisecond
	l := NewNodeLiveness(behind, testKeys.ks, "cut", ping, logging.TestLogger(t))
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool { return !l.Since().IsZero() }, 5*time.Second, 5*time.Millisecond)
	first := l.Since()

	subs := func() int64 {
		n, err := direct.PubSubNumSub(ctx, testKeys.nodeLivenessChannel("cut")).Result()
		require.NoError(t, err)
		return n[testKeys.nodeLivenessChannel("cut")]
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

// TestNodeLevelLastSeen: a recorder given its node's Liveness records the
// node-level last-seen on the liveness shard with every flush, and the
// confirmation of its subscription as soon as it comes (before any
// heartbeat); LivenessCandidates returns the node once that is past the
// grace and drops it past the window; ForgetNode spares a node that wrote
// since it was read, and Remove forgets it. A recorder without a Liveness
// records nothing. AppsOf names the apps the node has counts in, those
// it did not list before too.
func TestNodeLevelLastSeen(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		store := NewStore(rdb, testKeys.ks)
		live := NewNodeLiveness(rdb, testKeys.ks, "n", time.Second, logging.TestLogger(t))
		rec := NewRecorder(rdb, "n", RecorderOptions{Heartbeat: time.Hour, Liveness: live, Logger: logging.TestLogger(t)})
		old := NewRecorder(rdb, "old", RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
		for _, app := range []string{"a1", "a2"} {
			rec.Add(app, "room", 1)
			old.Add(app, "room", 1)
		}
		old.Add("a3", "room", 1)
		require.NoError(t, rec.Flush(ctx))
		require.NoError(t, old.Flush(ctx))
		all := func() []Candidate {
			c, err := store.LivenessCandidates(ctx, 0, time.Hour, 100)
			require.NoError(t, err)
			return c
		}
		cands := all()
		require.Len(t, cands, 1, "only the node with a Liveness records a node-level entry")
		require.Equal(t, "n", cands[0].Node)
		require.False(t, cands[0].Subscribed, "its subscription is not confirmed yet")

		// The confirmation is recorded by Run, without waiting for a flush.
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		wg.Go(func() { live.Run(ctx) })
		wg.Go(func() { _ = rec.Run(ctx) })
		require.Eventually(t, func() bool { c := all(); return len(c) == 1 && c[0].Subscribed }, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, cands[0].Seen, all()[0].Seen, "a confirmation does not move the last-seen")

		// Within the grace it is no candidate; past the window it is dropped.
		c, err := store.LivenessCandidates(ctx, time.Hour, 2*time.Hour, 100)
		require.NoError(t, err)
		require.Empty(t, c)
		time.Sleep(20 * time.Millisecond)
		c, err = store.LivenessCandidates(ctx, 0, 10*time.Millisecond, 100)
		require.NoError(t, err)
		require.Empty(t, c)
		require.Empty(t, all(), "an entry past the window is dropped")

		require.NoError(t, rec.Heartbeat(ctx))
		seen := all()[0].Seen
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, rec.Heartbeat(ctx))
		ok, err := store.ForgetNode(ctx, "n", seen)
		require.NoError(t, err)
		require.False(t, ok, "a node that wrote since it was read is kept")
		ok, err = store.ForgetNode(ctx, "n", all()[0].Seen)
		require.NoError(t, err)
		require.True(t, ok)
		require.Empty(t, all())

		apps, err := store.AppsOf(ctx, "old")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"a1", "a2", "a3"}, apps)
		// An app the store has not listed before is asked about too.
		old.Add("a4", "room", 1)
		require.NoError(t, old.Flush(ctx))
		apps, err = store.AppsOf(ctx, "old")
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"a1", "a2", "a3", "a4"}, apps)
		require.NoError(t, rec.Heartbeat(ctx))
		require.Len(t, all(), 1)
		require.NoError(t, rec.Remove(ctx))
		require.Empty(t, all(), "a graceful stop forgets the node")
		apps, err = store.AppsOf(ctx, "n")
		require.NoError(t, err)
		require.Empty(t, apps)
	})
}

// TestWatchNodesAddresses: a node's recorder registers its admin address
// with its node-level last-seen; WatchNodes lists it, ForgetNode deletes
// it, and an address whose node left seen (dropped past the window) is
// deleted by the next WatchNodes, so none outlives its node.
func TestWatchNodesAddresses(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		recorder := func(node, addr string) *Recorder {
			live := NewNodeLiveness(rdb, testKeys.ks, node, time.Second, logging.TestLogger(t))
			r := NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Liveness: live, Address: addr, Logger: logging.TestLogger(t)})
			r.Add("a1", "room", 1)
			require.NoError(t, r.Flush(ctx))
			return r
		}
		recorder("w", "127.0.0.1:9601")
		recorder("x", "[::1]:9601")
		recorder("none", "")
		list := func() map[string]string {
			nodes, err := store.WatchNodes(ctx, 100)
			require.NoError(t, err)
			out := map[string]string{}
			for _, n := range nodes {
				require.NotZero(t, n.Seen)
				out[n.Node] = n.Address
			}
			return out
		}
		require.Equal(t, map[string]string{"w": "127.0.0.1:9601", "x": "[::1]:9601", "none": ""}, list())
		addrKey := testKeys.livenessKeys()[2]
		addrs := func() []string {
			f, err := rdb.HKeys(ctx, addrKey).Result()
			require.NoError(t, err)
			return f
		}

		nodes, err := store.WatchNodes(ctx, 100)
		require.NoError(t, err)
		for _, n := range nodes {
			if n.Node == "x" {
				ok, err := store.ForgetNode(ctx, "x", n.Seen)
				require.NoError(t, err)
				require.True(t, ok)
			}
		}
		require.ElementsMatch(t, []string{"w"}, addrs(), "forgetting a node deletes its address")

		// Past the window the liveness check drops w from seen; its
		// address goes with the next list.
		require.Eventually(t, func() bool {
			_, err := store.LivenessCandidates(ctx, 0, time.Millisecond, 100)
			require.NoError(t, err)
			return len(list()) == 0
		}, 5*time.Second, 5*time.Millisecond)
		require.Empty(t, addrs(), "no address outlives its node")
	})
}
