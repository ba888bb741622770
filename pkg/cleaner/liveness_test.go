package cleaner

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// livenessCleaner is a cleaner whose dead-after is far away, so only the
// liveness check can reap within a test.
func livenessCleaner(t *testing.T, redisURL string, deadAfter time.Duration) *App {
	return livenessCleanerOn(t, config.Common{Redis: redisURL}, deadAfter)
}

// livenessCleanerOn is livenessCleaner on the Redis (or Cluster) of common.
func livenessCleanerOn(t *testing.T, common config.Common, deadAfter time.Duration) *App {
	cfg := config.DefaultCleaner()
	cfg.Redis, cfg.RedisCluster = common.Redis, common.RedisCluster
	cfg.AdminAddr = "" // the default port would collide with other test processes
	cfg.DeadAfter = deadAfter
	cfg.ScanInterval = 50 * time.Millisecond
	cfg.LeaseTTL = 0
	cfg.LivenessInterval = 20 * time.Millisecond
	cfg.LivenessGrace = 100 * time.Millisecond
	return runCleaner(t, cfg)
}

// runCleaner starts a cleaner of cfg until the test ends.
func runCleaner(t *testing.T, cfg config.Cleaner) *App {
	a, err := New(Options{Config: cfg, Logger: logging.TestLogger(t), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// liveNode is an in-process node: a recorder that heartbeats, and its
// liveness subscription on its own context (cancelling it closes the
// connection, as a dying process's does).
type liveNode struct {
	rec      *counts.Recorder
	live     *counts.Liveness
	stopRec  context.CancelFunc
	stopLive context.CancelFunc
}

// startLiveNode starts node id heartbeating every heartbeat, on its own
// connections, named id in CLIENT LIST.
func startLiveNode(t *testing.T, srv *redistest.Server, id string, heartbeat time.Duration) *liveNode {
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	opts.ClientName = id
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return startLiveNodeOn(t, rdb, id, heartbeat, true)
}

// startLiveNodeOn starts node id on its own client rdb. Without entry its
// recorder records no node-level last-seen, as a build from before it.
func startLiveNodeOn(t *testing.T, rdb redis.UniversalClient, id string, heartbeat time.Duration, entry bool) *liveNode {
	return startLiveNodeAt(t, rdb, id, heartbeat, entry, "")
}

// startLiveNodeAt starts node id as startLiveNodeOn does, registering addr
// as its admin address (see counts.RecorderOptions.Address).
func startLiveNodeAt(t *testing.T, rdb redis.UniversalClient, id string, heartbeat time.Duration, entry bool, addr string) *liveNode {
	n := &liveNode{live: counts.NewNodeLiveness(rdb, keyspace.Space{}, id, heartbeat, logging.TestLogger(t))}
	opts := counts.RecorderOptions{Heartbeat: heartbeat, Logger: logging.TestLogger(t), Address: addr}
	if entry {
		opts.Liveness = n.live
	}
	n.rec = counts.NewRecorder(rdb, id, opts)
	var recCtx, liveCtx context.Context
	recCtx, n.stopRec = context.WithCancel(context.Background())
	liveCtx, n.stopLive = context.WithCancel(context.Background())
	recDone, liveDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(recDone); _ = n.rec.Run(recCtx) }()
	go func() { defer close(liveDone); n.live.Run(liveCtx) }()
	t.Cleanup(func() { n.stopRec(); n.stopLive(); <-recDone; <-liveDone })
	require.Eventually(t, func() bool { return !n.live.Since().IsZero() }, 5*time.Second, 5*time.Millisecond)
	return n
}

func channelsOf(t *testing.T, store *counts.Store) map[string]int64 {
	got, err := store.Channels(context.Background(), "app", "")
	require.NoError(t, err)
	return got
}

// TestLivenessReapsAClosedNodeBeforeDeadAfter: a node whose liveness
// connection closes (and whose heartbeat stops, as a killed process's
// does) is reaped long before dead-after, with reason connection_closed;
// a live node beside it is untouched.
func TestLivenessReapsAClosedNodeBeforeDeadAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	a := livenessCleaner(t, srv.URL(), time.Minute)
	victim, live := startLiveNode(t, srv, "victim", 50*time.Millisecond), startLiveNode(t, srv, "live", 50*time.Millisecond)
	victim.rec.Add("app", "room", 2)
	live.rec.Add("app", "room", 3)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 5 }, 5*time.Second, 5*time.Millisecond)
	// Past the cleaner's trust window, and recorded subscribed.
	waitWatched(t, a, store, "victim")

	victim.stopRec()
	victim.stopLive()
	died := time.Now()
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 3 }, 5*time.Second, 5*time.Millisecond)
	t.Logf("reaped %v after its connection closed", time.Since(died).Round(time.Millisecond))
	// The reap lands in Redis before the cleaner counts it.
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)) == 1 },
		5*time.Second, 5*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonHeartbeat)))
}

// TestLivenessRetriesAppsThatSparedTheNode: a dying node's last heartbeat
// reaches its apps one after another, so when the check reaps it, an app
// may hold a last-seen younger than the grace and spare it. The node must
// stay a candidate, so the next check reaps it there too, not dead-after
// (a minute here) later. A second recorder under the victim's id, without
// a node-level entry, plays the app whose heartbeat came last: it keeps
// that app's last-seen fresh until the first reap has happened.
func TestLivenessRetriesAppsThatSparedTheNode(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	a := livenessCleaner(t, srv.URL(), time.Minute)
	victim := startLiveNode(t, srv, "victim", 50*time.Millisecond)
	late := counts.NewRecorder(srv.Client(t), "victim", counts.RecorderOptions{Heartbeat: 20 * time.Millisecond, Logger: logging.TestLogger(t)})
	lateCtx, stopLate := context.WithCancel(context.Background())
	lateDone := make(chan struct{})
	go func() { defer close(lateDone); _ = late.Run(lateCtx) }()
	t.Cleanup(func() { stopLate(); <-lateDone })
	victim.rec.Add("app-a", "room", 2)
	late.Add("app-b", "room", 2)
	require.Eventually(t, func() bool {
		na, err := store.Channel(context.Background(), "app-a", "room")
		require.NoError(t, err)
		nb, err := store.Channel(context.Background(), "app-b", "room")
		require.NoError(t, err)
		return na == 2 && nb == 2
	}, 5*time.Second, 5*time.Millisecond)
	waitWatched(t, a, store, "victim")

	victim.stopRec()
	victim.stopLive()
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.reaped.WithLabelValues("app-a", reasonClosed)) == 1 },
		5*time.Second, 5*time.Millisecond, "the closed node was not reaped in app-a")
	stopLate() // app-b's last-seen now ages past the grace
	require.Eventually(t, func() bool {
		n, err := store.Channel(context.Background(), "app-b", "room")
		require.NoError(t, err)
		return n == 0
	}, 5*time.Second, 5*time.Millisecond, "app-b spared the node once and was never looked at again")
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.reaped.WithLabelValues("app-b", reasonClosed)) == 1 },
		5*time.Second, 5*time.Millisecond)
}

// TestLivenessSparesAHungNode: a node that stops writing but keeps its
// connection (SIGSTOP, a long pause) is reaped at dead-after, not before.
func TestLivenessSparesAHungNode(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	const deadAfter = 1500 * time.Millisecond
	a := livenessCleaner(t, srv.URL(), deadAfter)
	hung := startLiveNode(t, srv, "hung", 50*time.Millisecond)
	hung.rec.Add("app", "room", 2)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 2 }, 5*time.Second, 5*time.Millisecond)
	waitWatched(t, a, store, "hung")

	hung.stopRec() // heartbeats stop; the liveness subscription stays
	stopped := time.Now()
	for time.Since(stopped) < deadAfter-200*time.Millisecond {
		require.EqualValues(t, 2, channelsOf(t, store)["room"], "reaped while its connection was open, before dead-after")
		time.Sleep(20 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		return len(channelsOf(t, store)) == 0 && testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonHeartbeat)) == 1
	}, 3*time.Second, 10*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)))
}

// TestLivenessBlipReapsAndTheNodeRepublishes: Redis drops a live node's
// liveness connection (CLIENT KILL, as a network blip would). The cleaner
// may reap it meanwhile; the node resubscribes, and its next heartbeat
// finds its contribution gone and republishes it, so the counts converge.
func TestLivenessBlipReapsAndTheNodeRepublishes(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	store := counts.NewStore(rdb, keyspace.Space{})
	ctx := context.Background()
	a := livenessCleaner(t, srv.URL(), time.Minute)
	// Heartbeats slower than the grace, so a dropped connection can be
	// reaped between two of them.
	n := startLiveNode(t, srv, "blip", 400*time.Millisecond)
	n.rec.Add("app", "room", 4)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 4 }, 5*time.Second, 5*time.Millisecond)
	waitWatched(t, a, store, "blip")
	before := n.live.Since()

	// Drop the node's pub/sub connection until the cleaner has reaped it
	// (the node resubscribes within tens of ms, so it may take a few).
	reaped := func() bool { return testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)) >= 1 }
	deadline := time.Now().Add(10 * time.Second)
	for !reaped() {
		require.True(t, time.Now().Before(deadline), "the cleaner never reaped the node whose connection dropped")
		killPubSub(t, rdb, "blip")
		time.Sleep(5 * time.Millisecond)
	}
	// The node resubscribes and its next heartbeat republishes.
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 4 && n.live.Since().After(before) },
		5*time.Second, 5*time.Millisecond, "the node did not republish after being reaped")
	nodes, err := store.Nodes(ctx, "app", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, nodes.Alive())
}

// killPubSub drops the pub/sub connections of the client named name.
func killPubSub(t *testing.T, rdb *redis.Client, name string) {
	list, err := rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		var id string
		named, pubsub := false, false
		for _, kv := range f {
			k, v, _ := strings.Cut(kv, "=")
			switch {
			case k == "id":
				id = v
			case k == "name" && v == name:
				named = true
			case k == "flags" && strings.Contains(v, "P"):
				pubsub = true
			}
		}
		if named && pubsub {
			_ = rdb.Do(context.Background(), "CLIENT", "KILL", "ID", id).Err()
		}
	}
}

func (a *App) seenLiveCopy() map[string]time.Time {
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	return maps.Clone(a.seenLive)
}

// waitWatched waits until a's liveness check can reap node: the cleaner
// trusts its check (its canary has held long enough) and the node has
// recorded its confirmed subscription with its node-level last-seen.
func waitWatched(t *testing.T, a *App, store *counts.Store, node string) {
	t.Helper()
	require.Eventually(t, func() bool {
		since := a.canary.Since()
		return !since.IsZero() && time.Since(since) > livenessTrustAfter
	}, 10*time.Second, 10*time.Millisecond, "the cleaner never trusted its liveness check")
	require.Eventually(t, func() bool { return recordedSubscribed(t, store, node) }, 5*time.Second, 5*time.Millisecond,
		"%s never recorded its subscription", node)
}

// recordedSubscribed: node's node-level entry says its subscription was
// confirmed.
func recordedSubscribed(t *testing.T, store *counts.Store, node string) bool {
	cands, err := store.LivenessCandidates(context.Background(), 0, time.Hour, 10000)
	require.NoError(t, err)
	for _, c := range cands {
		if c.Node == node {
			return c.Subscribed
		}
	}
	return false
}

// backends runs f against a single Redis and a 3-master Cluster, with a
// dial that returns a client of its own, named as given in CLIENT LIST.
func backends(t *testing.T, f func(t *testing.T, common config.Common, dial func(name string) redis.UniversalClient)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		var common config.Common
		var opts redis.UniversalOptions
		if b.Cluster != nil {
			common.RedisCluster = b.Cluster.Seeds()
			opts.Addrs = strings.Split(b.Cluster.Seeds(), ",")
			opts.IsClusterMode = true
		} else {
			common.Redis = b.Single.URL()
			opts.Addrs = []string{b.Single.Addr}
		}
		f(t, common, func(name string) redis.UniversalClient {
			o := opts
			o.ClientName = name
			c := redis.NewUniversalClient(&o)
			t.Cleanup(func() { _ = c.Close() })
			return c
		})
	})
}

// TestLivenessReapsANodeInEveryOfManyApps: a node with counts in 500 apps
// loses its liveness subscription and its heartbeat at once (SIGKILL). The
// check, which looks at nodes and not at apps, still reaps it in every
// app, by reason connection_closed, long before dead-after; the live node
// in the same apps keeps its counts.
func TestLivenessReapsANodeInEveryOfManyApps(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	backends(t, func(t *testing.T, common config.Common, dial func(string) redis.UniversalClient) {
		const apps = 500
		ctx := context.Background()
		rdb := dial("test")
		store := counts.NewStore(rdb, keyspace.Space{})
		a := livenessCleanerOn(t, common, time.Minute)
		const heartbeat = 250 * time.Millisecond
		victim := startLiveNodeOn(t, dial("victim"), "victim", heartbeat, true)
		live := startLiveNodeOn(t, dial("live"), "live", heartbeat, true)
		appName := func(i int) string { return fmt.Sprintf("app%d", i) }
		for i := range apps {
			victim.rec.Add(appName(i), "room", 2)
			live.rec.Add(appName(i), "room", 3)
		}
		counted := func(want int64) bool {
			for i := range apps {
				n, err := store.Channel(ctx, appName(i), "room")
				require.NoError(t, err)
				if n != want {
					return false
				}
			}
			return true
		}
		require.Eventually(t, func() bool { return counted(5) }, 20*time.Second, 100*time.Millisecond)
		waitWatched(t, a, store, "victim")

		victim.stopRec()
		victim.stopLive()
		died := time.Now()
		reaped := func() (n float64) {
			for i := range apps {
				n += testutil.ToFloat64(a.m.reaped.WithLabelValues(appName(i), reasonClosed))
			}
			return n
		}
		require.Eventually(t, func() bool { return reaped() == apps }, 20*time.Second, 5*time.Millisecond,
			"the node was not reaped in every app by the liveness check")
		took := time.Since(died)
		t.Logf("reaped in %d apps %v after its connection closed", apps, took.Round(time.Millisecond))
		// Long before dead-after (a minute): a fixed few seconds failed in
		// CI under -race beside other packages (6.1 s), and the reason
		// checked per app below already tells the check from a heartbeat.
		require.Less(t, took, time.Minute/2, "the liveness check took as long as a heartbeat would")
		require.True(t, counted(3), "only the dead node's counts are gone")
		for i := range apps {
			require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues(appName(i), reasonHeartbeat)))
		}
		require.False(t, recordedSubscribed(t, store, "victim"), "a node reaped everywhere keeps no node-level entry")
	})
}

// TestLivenessReapsANodeKilledBeforeTheCheckSawIt: a node killed before
// any liveness check looked at it (in its first moments) is reaped by the
// check all the same, because it recorded its confirmed subscription
// itself; the cleaner never saw it subscribed. The checks are driven by
// hand so that none runs before the kill.
func TestLivenessReapsANodeKilledBeforeTheCheckSawIt(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	ctx, cancel := context.WithCancel(context.Background())
	cfg := config.DefaultCleaner()
	cfg.Redis, cfg.AdminAddr, cfg.LeaseTTL = srv.URL(), "", 0
	cfg.DeadAfter, cfg.LivenessGrace = time.Minute, 100*time.Millisecond
	a, err := New(Options{Config: cfg, Logger: logging.TestLogger(t), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.rdb.Close() })
	canaryDone := make(chan struct{})
	go func() { defer close(canaryDone); a.canary.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-canaryDone })

	n := startLiveNode(t, srv, "early", time.Hour) // no heartbeat: only its first write
	n.rec.Add("app", "room", 2)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 2 }, 5*time.Second, 5*time.Millisecond)
	waitWatched(t, a, store, "early")
	n.stopRec()
	n.stopLive()

	always := func() bool { return true }
	require.Eventually(t, func() bool {
		require.NoError(t, a.checkLiveness(ctx, always))
		return len(channelsOf(t, store)) == 0
	}, 5*time.Second, 20*time.Millisecond, "a node the check never saw subscribed waits for dead-after")
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)) == 1 },
		5*time.Second, 5*time.Millisecond)
	require.NotContains(t, a.seenLiveCopy(), "early", "the cleaner saw it subscribed after all")
}

// TestLivenessLeavesNodesWithoutEntryToDeadAfter: a node that records no
// node-level last-seen (a build from before it, during a rolling upgrade)
// and one whose entry was lost are killed; the liveness check never looks
// at them, so both are reaped at dead-after by their heartbeat, never
// early.
func TestLivenessLeavesNodesWithoutEntryToDeadAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	ctx := context.Background()
	const deadAfter = 1500 * time.Millisecond
	a := livenessCleaner(t, srv.URL(), deadAfter)
	old := startLiveNodeOn(t, srv.Client(t), "old", 50*time.Millisecond, false)
	lost := startLiveNode(t, srv, "lost", 50*time.Millisecond)
	old.rec.Add("app", "room", 2)
	lost.rec.Add("app", "room", 3)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 5 }, 5*time.Second, 5*time.Millisecond)
	waitWatched(t, a, store, "lost")

	old.stopRec()
	old.stopLive()
	lost.stopRec()
	_, err := store.ForgetNode(ctx, "lost", -1) // the entry is lost, the subscription still held
	require.NoError(t, err)
	lost.stopLive()
	killed := time.Now()
	for time.Since(killed) < deadAfter-300*time.Millisecond {
		require.EqualValues(t, 5, channelsOf(t, store)["room"], "reaped by the liveness check without a node-level entry")
		time.Sleep(20 * time.Millisecond)
	}
	// The reap lands in Redis before the cleaner counts it: wait for both.
	require.Eventually(t, func() bool {
		return len(channelsOf(t, store)) == 0 && testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonHeartbeat)) == 2
	}, 3*time.Second, 10*time.Millisecond, "both nodes reaped by dead-after")
	require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)))
}

// TestLivenessCheckCostDoesNotGrowWithApps: in the steady state (every
// node alive) a liveness check runs as many Redis commands with 1,000 apps
// as with 10, counted by INFO commandstats; before the node-level
// last-seen it ran three per app.
func TestLivenessCheckCostDoesNotGrowWithApps(t *testing.T) {
	t.Parallel()
	perCheck := func(apps int) float64 {
		f := newFleet(t, apps)
		const checks = 30
		load := f.measure(t, checks, func() {}, func() {})
		return float64(load.calls) / checks
	}
	few, many := perCheck(10), perCheck(1000)
	t.Logf("commands per check: %.1f with 10 apps, %.1f with 1,000", few, many)
	require.InDelta(t, few, many, 1, "the check's work grows with the number of apps")
}
