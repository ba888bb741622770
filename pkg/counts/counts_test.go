package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/logging"
)

// testKeys are the keys of the default keyspace.
var testKeys keys

func newSingle(t testing.TB) redis.UniversalClient { return redistest.New(t).Client(t) }

func newRecorder(t testing.TB, rdb redis.UniversalClient, node string) *Recorder {
	return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
}

// snapshotScript reads every count of one app in one atomic unit (global
// channel counts, presence members, connections, the nodes' epochs, and
// every registered node's contribution, and each reap's under way as
// "reaping:<id>"), so a
// test can check the invariants while writers and reapers run. KEYS is test-only here: it scans the app's slot.
var snapshotScript = redis.NewScript(`
local P = ARGV[1]
local out = {redis.call('ZRANGE', P .. 'channels', 0, -1, 'WITHSCORES'), redis.call('GET', P .. 'conns') or '0'}
local members = {}
for _, k in ipairs(redis.call('KEYS', P .. 'members:*')) do
  table.insert(members, string.sub(k, #P + 9))
  table.insert(members, redis.call('HGETALL', k))
end
table.insert(out, members)
table.insert(out, redis.call('HGETALL', P .. 'epochs'))
for _, id in ipairs(redis.call('ZRANGE', P .. 'nodes', 0, -1)) do
  table.insert(out, id)
  table.insert(out, redis.call('HGETALL', P .. 'node:' .. id))
end
for _, id in ipairs(redis.call('SMEMBERS', P .. 'reaps')) do
  table.insert(out, 'reaping:' .. id)
  table.insert(out, redis.call('HGETALL', P .. 'reaping:' .. id))
end
return out`)

type snapshot struct {
	global  map[string]int64            // channel -> sockets
	members map[string]int64            // "channel\nuser" -> sockets
	conns   int64                       // open sockets
	contrib map[string]map[string]int64 // node (or "reaping:<id>") -> field -> count
	epochs  map[string]string           // node -> epoch
}

func atoi(t testing.TB, v any) int64 {
	t.Helper()
	n, err := toInt(v)
	require.NoError(t, err)
	return n
}

func takeSnapshot(t testing.TB, rdb redis.UniversalClient, app string) snapshot {
	t.Helper()
	res, err := snapshotScript.Run(context.Background(), rdb, []string{testKeys.nodesKey(app)}, testKeys.appPrefix(app)).Slice()
	require.NoError(t, err)
	s := snapshot{global: map[string]int64{}, members: map[string]int64{}, contrib: map[string]map[string]int64{}, epochs: map[string]string{}}
	g := res[0].([]any)
	for i := 0; i < len(g); i += 2 {
		s.global[g[i].(string)] = atoi(t, g[i+1])
	}
	s.conns = atoi(t, res[1])
	m := res[2].([]any)
	for i := 0; i < len(m); i += 2 {
		h := m[i+1].([]any)
		for j := 0; j < len(h); j += 2 {
			s.members[m[i].(string)+"\n"+h[j].(string)] = atoi(t, h[j+1])
		}
	}
	e := res[3].([]any)
	for i := 0; i < len(e); i += 2 {
		s.epochs[e[i].(string)] = e[i+1].(string)
	}
	for i := 4; i < len(res); i += 2 {
		h := res[i+1].([]any)
		c := map[string]int64{}
		for j := 0; j < len(h); j += 2 {
			c[h[j].(string)] = atoi(t, h[j+1])
		}
		s.contrib[res[i].(string)] = c
	}
	return s
}

// checkInvariants asserts invariants 1 and 2 for channel counts, presence
// members and connections: each global equals the sum of the registered
// contributions (and of those of reaps under way, which the globals hold
// until their slices subtract them), and no entry is zero or negative;
// and that the registered nodes are those with an epoch.
func checkInvariants(t testing.TB, s snapshot) {
	t.Helper()
	channels, members := map[string]int64{}, map[string]int64{}
	var conns int64
	var registered, withEpoch []string
	for node := range s.contrib {
		if !strings.HasPrefix(node, "reaping:") {
			registered = append(registered, node)
		}
	}
	for node := range s.epochs {
		withEpoch = append(withEpoch, node)
	}
	require.ElementsMatch(t, registered, withEpoch, "every registered node, and only they, must have an epoch")
	for node, c := range s.contrib {
		for f, n := range c {
			require.Positive(t, n, "node %s field %q", node, f)
			switch kind, ch, user := parseField(f); kind {
			case 'c':
				channels[ch] += n
			case 'm':
				members[ch+"\n"+user] += n
			case 'n':
				conns += n
			default:
				t.Fatalf("node %s has unknown field %q", node, f)
			}
		}
	}
	for ch, n := range s.global {
		require.Positive(t, n, "global channel %s", ch)
	}
	for m, n := range s.members {
		require.Positive(t, n, "member %q", m)
	}
	require.Equal(t, channels, s.global, "global channel counts must equal the sum of registered contributions")
	require.Equal(t, members, s.members, "presence members must equal the sum of registered contributions")
	require.Equal(t, conns, s.conns, "connections must equal the sum of registered contributions")
}

func TestRecorderCountsAndZeroEntries(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		live, other := newRecorder(t, rdb, "live"), newRecorder(t, rdb, "other")
		live.Add("app", "x", 2)
		live.Add("app", "y", 1)
		other.Add("app", "x", 1)
		require.NoError(t, live.Flush(ctx))
		require.NoError(t, other.Flush(ctx))

		// A cleaner that saw no heartbeat for a while reaps "live".
		ok, reaped, err := store.ReapNode(ctx, "app", "live", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, map[string]int64{"x": 1, "y": 0}, reaped.Channels)
		require.Equal(t, []string{"y"}, reaped.Vacated())
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
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	store := NewStore(rdb, testKeys.ks)
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
	t.Parallel()
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
	apps, err := NewStore(rdb, testKeys.ks).Apps(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"app"}, apps)
}

func TestRemoveNode(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := NewRecorder(rdb, "n", RecorderOptions{Heartbeat: 20 * time.Millisecond, Coalesce: 2 * time.Millisecond, Logger: logging.TestLogger(t)})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Add("app", "x", 1)
	store := NewStore(rdb, testKeys.ks)
	require.Eventually(t, func() bool { n, _ := store.Channel(ctx, "app", "x"); return n == 1 }, 5*time.Second, 2*time.Millisecond)
	require.Eventually(t, r.Healthy, 5*time.Second, 2*time.Millisecond, "healthy is set just after the write lands")
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
// republish) and some crashed (they stay gone). Some flushes time out in
// the client, and Redis runs their calls at a random later time, before
// or after the republish that follows (the epochs must refuse those after). Invariants 1 and 2 are
// checked on atomic snapshots throughout, and at the end the global counts
// equal the model's truth: the sum of the live nodes' local state.
func TestPropertyCountsStayExact(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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
	store := NewStore(rdb, testKeys.ks)
	// Two fields a unit: every reap of a node takes many units, so the
	// invariants are checked while reaps are half done.
	store.SliceSize = 2
	recs := make([]*Recorder, nodes)
	crashed := make([]bool, nodes)
	for i := range recs {
		// Republishes in units of two fields too.
		recs[i] = NewRecorder(rdb, fmt.Sprintf("node%d", i), RecorderOptions{Heartbeat: time.Hour, SliceSize: 2})
	}
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			subs := map[string]int64{}    // this node's sockets per channel, the model
			members := map[string]int64{} // and per presence member field
			var stale []staleCall         // calls of lost flushes Redis has not run yet
			defer func() {
				for _, c := range stale {
					c.run(t, rdb)
				}
			}()
			for step := range steps {
				ch := fmt.Sprintf("ch%d", rng.IntN(channels))
				user := fmt.Sprintf("u%d", rng.IntN(4))
				leave := subs[ch] > 0 && rng.IntN(2) == 0
				switch {
				case rng.IntN(3) == 0: // a presence socket of user on ch
					f := memberField("presence-"+ch, user)
					if leave && members[f] > 0 {
						if members[f]--; members[f] == 0 {
							delete(members, f)
						}
						r.AddMember(app, "presence-"+ch, user, nil, -1)
					} else {
						members[f]++
						r.AddMember(app, "presence-"+ch, user, json.RawMessage(`{"n":1}`), 1)
					}
				case rng.IntN(4) == 0:
					r.AddConnections(app, 1)
				case leave:
					if subs[ch]--; subs[ch] == 0 {
						delete(subs, ch)
					}
					r.Add(app, ch, -1)
				default:
					subs[ch]++
					r.Add(app, ch, 1)
				}
				switch {
				case rng.IntN(5) == 0:
					_ = r.Flush(ctx)
				case rng.IntN(40) == 0:
					_ = r.Heartbeat(ctx)
				case rng.IntN(10) == 0:
					stale = append(stale, loseFlush(t, r)...)
				}
				if len(stale) > 0 && rng.IntN(4) == 0 {
					k := rng.IntN(len(stale))
					stale[k].run(t, rdb)
					stale = slices.Delete(stale, k, k+1)
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
	for i, r := range recs {
		if !crashed[i] {
			require.Equal(t, localFields(r, app), s.contrib[r.node], "node%d's contribution must be its local truth", i)
			require.Equal(t, r.apps[app].epoch, s.epochs[r.node], "node%d's epoch must be its last republish's", i)
		}
	}
	require.NotContains(t, s.contrib, "node0")
	require.Len(t, s.contrib, nodes-1)
}

// localFields is a node's whole local truth: channels, members, connections.
func localFields(r *Recorder, app string) map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int64{}
	for f, n := range r.apps[app].local {
		out[f] = n
	}
	return out
}
