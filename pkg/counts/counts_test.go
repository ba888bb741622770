package counts

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/redisx/redistest"
)

// backends runs f against a single Redis and a 3-master Cluster.
func backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("single", func(t *testing.T) { f(t, redistest.New(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("cluster in -short")
		}
		f(t, redistest.NewCluster(t).Client(t))
	})
}

func newRecorder(t testing.TB, rdb redis.UniversalClient, node string) *Recorder {
	return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
}

// snapshotScript reads the global counts and every registered contribution
// of one app in one atomic unit, so a test can check invariant 1 while
// writers and reapers run.
var snapshotScript = redis.NewScript(`
local out = {redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  table.insert(out, id)
  table.insert(out, redis.call('HGETALL', ARGV[1] .. id))
end
return out`)

type snapshot struct {
	global  map[string]int64
	contrib map[string]map[string]int64
}

func takeSnapshot(t testing.TB, rdb redis.UniversalClient, app string) snapshot {
	t.Helper()
	res, err := snapshotScript.Run(context.Background(), rdb,
		[]string{nodesKey(app), globalKey(app)}, nodeKey(app, "")).Slice()
	require.NoError(t, err)
	s := snapshot{global: map[string]int64{}, contrib: map[string]map[string]int64{}}
	g := res[0].([]any)
	for i := 0; i < len(g); i += 2 {
		var n int64
		fmt.Sscan(g[i+1].(string), &n)
		s.global[g[i].(string)] = n
	}
	for i := 1; i < len(res); i += 2 {
		h := res[i+1].([]any)
		c := map[string]int64{}
		for j := 0; j < len(h); j += 2 {
			var n int64
			fmt.Sscan(h[j+1].(string), &n)
			c[h[j].(string)] = n
		}
		s.contrib[res[i].(string)] = c
	}
	return s
}

// checkInvariants asserts invariants 1 and 2: the global equals the sum of
// the registered contributions, and no entry is zero or negative.
func checkInvariants(t testing.TB, s snapshot) {
	t.Helper()
	sum := map[string]int64{}
	for node, c := range s.contrib {
		for ch, n := range c {
			require.Positive(t, n, "node %s channel %s", node, ch)
			sum[ch] += n
		}
	}
	for ch, n := range s.global {
		require.Positive(t, n, "global channel %s", ch)
	}
	require.Equal(t, sum, s.global, "global must equal the sum of registered contributions")
}

func TestRecorderCountsAndZeroEntries(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb)
		a, b := newRecorder(t, rdb, "a"), newRecorder(t, rdb, "b")
		a.Add("app1", "chat", 1)
		a.Add("app1", "chat", 1)
		a.Add("app1", "news", 1)
		b.Add("app1", "chat", 1)
		b.Add("app2", "chat", 1)
		require.NoError(t, a.Flush(ctx))
		require.NoError(t, b.Flush(ctx))

		n, err := store.Channel(ctx, "app1", "chat")
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		all, err := store.Channels(ctx, "app1", "")
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"chat": 3, "news": 1}, all)
		only, err := store.Channels(ctx, "app1", "ne")
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"news": 1}, only)

		a.Add("app1", "news", -1)
		require.NoError(t, a.Flush(ctx))
		n, err = store.Channel(ctx, "app1", "news")
		require.NoError(t, err)
		require.Zero(t, n)
		s := takeSnapshot(t, rdb, "app1")
		checkInvariants(t, s)
		require.NotContains(t, s.global, "news", "a vacated channel must disappear")
		require.NotContains(t, s.contrib["a"], "news")

		apps, err := store.Apps(ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"app1", "app2"}, apps)
	})
}

func TestCoalescedChangesNetOut(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	r := newRecorder(t, rdb, "n")
	r.Add("app", "x", 1)
	require.NoError(t, r.Flush(ctx))
	for range 100 {
		r.Add("app", "x", 1)
		r.Add("app", "x", -1)
	}
	r.Add("app", "x", -1)
	require.NoError(t, r.Flush(ctx))
	s := takeSnapshot(t, rdb, "app")
	checkInvariants(t, s)
	require.Empty(t, s.global)
}

func TestNegativeChangeIsClampedNotWritten(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	r := newRecorder(t, rdb, "n")
	r.Add("app", "x", 2)
	require.NoError(t, r.Flush(ctx))
	r.Add("app", "x", -5)
	require.NoError(t, r.Flush(ctx))
	s := takeSnapshot(t, rdb, "app")
	checkInvariants(t, s)
	require.Empty(t, s.global)
	require.Empty(t, r.Local("app"))
}

func TestReapedWhileAliveRepublishes(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb)
		live, other := newRecorder(t, rdb, "live"), newRecorder(t, rdb, "other")
		live.Add("app", "x", 2)
		live.Add("app", "y", 1)
		other.Add("app", "x", 1)
		require.NoError(t, live.Flush(ctx))
		require.NoError(t, other.Flush(ctx))

		// A cleaner that saw no heartbeat for a while reaps "live".
		ok, n, err := store.ReapNode(ctx, "app", "live", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, n)
		checkInvariants(t, takeSnapshot(t, rdb, "app"))

		// Its next write must not land as a delta on a missing contribution.
		live.Add("app", "y", 1)
		require.NoError(t, live.Flush(ctx))
		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, map[string]int64{"x": 3, "y": 2}, s.global)

		// The same through a heartbeat alone.
		_, _, err = store.ReapNode(ctx, "app", "live", 0)
		require.NoError(t, err)
		require.NoError(t, live.Heartbeat(ctx))
		s = takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, map[string]int64{"x": 3, "y": 2}, s.global)
	})
}

func TestReapSparesFreshNodesAndRunsOnce(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	store := NewStore(rdb)
	r := newRecorder(t, rdb, "n")
	r.Add("app", "x", 1)
	require.NoError(t, r.Flush(ctx))

	stale, err := store.StaleNodes(ctx, "app", time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, stale)
	ok, _, err := store.ReapNode(ctx, "app", "n", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "a node seen just now is not reaped")

	require.Eventually(t, func() bool {
		stale, err := store.StaleNodes(ctx, "app", 20*time.Millisecond, 10)
		return err == nil && len(stale) == 1 && stale[0] == "n"
	}, 5*time.Second, 5*time.Millisecond)
	ok, _, err = store.ReapNode(ctx, "app", "n", 20*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	ok, _, err = store.ReapNode(ctx, "app", "n", 0)
	require.NoError(t, err)
	require.False(t, ok, "a reaped node is gone: reaping again does nothing")
	checkInvariants(t, takeSnapshot(t, rdb, "app"))
}

func TestRedisRestartedEmptyIsRepopulated(t *testing.T) {
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	r := newRecorder(t, rdb, "n")
	r.Add("app", "x", 4)
	require.NoError(t, r.Flush(ctx))
	srv.Restart(t)
	// The first attempt may meet a dead pooled connection; a node retries on
	// its next heartbeat, which this loop stands in for.
	require.Eventually(t, func() bool { return r.Heartbeat(ctx) == nil }, 5*time.Second, 10*time.Millisecond)
	s := takeSnapshot(t, rdb, "app")
	checkInvariants(t, s)
	require.Equal(t, map[string]int64{"x": 4}, s.global)
	apps, err := NewStore(rdb).Apps(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"app"}, apps)
}

func TestRemoveNode(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	a, b := newRecorder(t, rdb, "a"), newRecorder(t, rdb, "b")
	a.Add("app", "x", 1)
	b.Add("app", "x", 1)
	require.NoError(t, a.Flush(ctx))
	require.NoError(t, b.Flush(ctx))
	require.NoError(t, a.Remove(ctx))
	a.Add("app", "x", 1) // after Remove: ignored
	require.NoError(t, a.Flush(ctx))
	s := takeSnapshot(t, rdb, "app")
	checkInvariants(t, s)
	require.Equal(t, map[string]int64{"x": 1}, s.global)
	require.NotContains(t, s.contrib, "a")
}

func TestRunFlushesAndHeartbeats(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := NewRecorder(rdb, "n", RecorderOptions{Heartbeat: 20 * time.Millisecond, Coalesce: 2 * time.Millisecond, Logger: logging.TestLogger(t)})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Add("app", "x", 1)
	store := NewStore(rdb)
	require.Eventually(t, func() bool { n, _ := store.Channel(ctx, "app", "x"); return n == 1 }, 5*time.Second, 2*time.Millisecond)
	require.True(t, r.Healthy())
	_, seen1, err := store.Contributions(ctx, "app")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, seen2, err := store.Contributions(ctx, "app")
		return err == nil && seen2["n"].After(seen1["n"])
	}, 5*time.Second, 5*time.Millisecond, "heartbeat must move last-seen forward")
	// Reaped while Run is going: the next heartbeat republishes.
	_, _, err = store.ReapNode(ctx, "app", "n", 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { n, _ := store.Channel(ctx, "app", "x"); return n == 1 }, 5*time.Second, 2*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// TestPropertyCountsStayExact is the property test of the counting core:
// simulated nodes apply random subscribe/unsubscribe streams concurrently
// while reapers remove nodes at random, some of them alive (they must
// republish) and some crashed (they stay gone). Invariants 1 and 2 are
// checked on atomic snapshots throughout, and at the end the global counts
// equal the model's truth: the sum of the live nodes' local state.
func TestPropertyCountsStayExact(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { propertyRun(t, rdb, seed) })
		}
	})
}

func propertyRun(t *testing.T, rdb redis.UniversalClient, seed uint64) {
	const (
		nodes    = 6
		channels = 12
		steps    = 400
	)
	ctx := context.Background()
	app := fmt.Sprintf("prop%d", seed)
	store := NewStore(rdb)
	recs := make([]*Recorder, nodes)
	crashed := make([]bool, nodes)
	for i := range recs {
		recs[i] = NewRecorder(rdb, fmt.Sprintf("node%d", i), RecorderOptions{Heartbeat: time.Hour})
	}
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			subs := map[string]int64{} // this node's sockets per channel, the model
			for step := range steps {
				ch := fmt.Sprintf("ch%d", rng.IntN(channels))
				if subs[ch] > 0 && rng.IntN(2) == 0 {
					if subs[ch]--; subs[ch] == 0 {
						delete(subs, ch)
					}
					r.Add(app, ch, -1)
				} else {
					subs[ch]++
					r.Add(app, ch, 1)
				}
				switch {
				case rng.IntN(5) == 0:
					_ = r.Flush(ctx)
				case rng.IntN(40) == 0:
					_ = r.Heartbeat(ctx)
				}
				// Node 0 crashes midway: it stops writing for good.
				if i == 0 && step == steps/2 {
					crashed[0] = true
					return
				}
			}
			require.Equal(t, subs, r.Local(app))
		}()
	}
	// Reapers: two of them, racing each other and the writers. Reaping with
	// dead-after 0 removes live nodes too, which must republish.
	stop := make(chan struct{})
	var reapers sync.WaitGroup
	for k := range 2 {
		reapers.Add(1)
		go func() {
			defer reapers.Done()
			rng := rand.New(rand.NewPCG(seed, 100+uint64(k)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				node := fmt.Sprintf("node%d", rng.IntN(nodes))
				_, _, err := store.ReapNode(ctx, app, node, 0)
				require.NoError(t, err)
				checkInvariants(t, takeSnapshot(t, rdb, app))
			}
		}()
	}
	wg.Wait()
	close(stop)
	reapers.Wait()

	// The crashed node is reaped for good; live nodes heartbeat (and so
	// republish if they were reaped last).
	_, _, err := store.ReapNode(ctx, app, "node0", 0)
	require.NoError(t, err)
	truth := map[string]int64{}
	for i, r := range recs {
		if crashed[i] {
			continue
		}
		require.NoError(t, r.Heartbeat(ctx))
		for ch, n := range r.Local(app) {
			truth[ch] += n
		}
	}
	s := takeSnapshot(t, rdb, app)
	checkInvariants(t, s)
	require.Equal(t, truth, s.global, "global counts must equal the live nodes' truth")
	require.NotContains(t, s.contrib, "node0")
	require.Len(t, s.contrib, nodes-1)
}
