package cleaner

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/redisx/redistest"
)

// livenessCleaner is a cleaner whose dead-after is far away, so only the
// liveness check can reap within a test.
func livenessCleaner(t *testing.T, redisURL string, deadAfter time.Duration) *App {
	cfg := config.DefaultCleaner()
	cfg.Redis = redisURL
	cfg.DeadAfter = deadAfter
	cfg.ScanInterval = 50 * time.Millisecond
	cfg.LeaseTTL = 0
	cfg.LivenessInterval = 20 * time.Millisecond
	cfg.LivenessGrace = 100 * time.Millisecond
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
	n := &liveNode{
		rec:  counts.NewRecorder(rdb, id, counts.RecorderOptions{Heartbeat: heartbeat}),
		live: counts.NewNodeLiveness(rdb, id, heartbeat, logging.TestLogger(t)),
	}
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
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t))
	a := livenessCleaner(t, srv.URL(), time.Minute)
	victim, live := startLiveNode(t, srv, "victim", 50*time.Millisecond), startLiveNode(t, srv, "live", 50*time.Millisecond)
	victim.rec.Add("app", "room", 2)
	live.rec.Add("app", "room", 3)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 5 }, 5*time.Second, 5*time.Millisecond)
	// Past the cleaner's trust window, and seen live by it.
	require.Eventually(t, func() bool { _, ok := a.seenLiveCopy()["victim"]; return ok }, 5*time.Second, 10*time.Millisecond)

	victim.stopRec()
	victim.stopLive()
	died := time.Now()
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 3 }, 5*time.Second, 5*time.Millisecond)
	t.Logf("reaped %v after its connection closed", time.Since(died).Round(time.Millisecond))
	require.EqualValues(t, 1, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)))
	require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonHeartbeat)))
}

// TestLivenessSparesAHungNode: a node that stops writing but keeps its
// connection (SIGSTOP, a long pause) is reaped at dead-after, not before.
func TestLivenessSparesAHungNode(t *testing.T) {
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t))
	const deadAfter = 1500 * time.Millisecond
	a := livenessCleaner(t, srv.URL(), deadAfter)
	hung := startLiveNode(t, srv, "hung", 50*time.Millisecond)
	hung.rec.Add("app", "room", 2)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 2 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { _, ok := a.seenLiveCopy()["hung"]; return ok }, 5*time.Second, 10*time.Millisecond)

	hung.stopRec() // heartbeats stop; the liveness subscription stays
	stopped := time.Now()
	for time.Since(stopped) < deadAfter-200*time.Millisecond {
		require.EqualValues(t, 2, channelsOf(t, store)["room"], "reaped while its connection was open, before dead-after")
		time.Sleep(20 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return len(channelsOf(t, store)) == 0 }, 3*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonHeartbeat)))
	require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed)))
}

// TestLivenessBlipReapsAndTheNodeRepublishes: Redis drops a live node's
// liveness connection (CLIENT KILL, as a network blip would). The cleaner
// may reap it meanwhile; the node resubscribes, and its next heartbeat
// finds its contribution gone and republishes it, so the counts converge.
func TestLivenessBlipReapsAndTheNodeRepublishes(t *testing.T) {
	srv := redistest.New(t)
	rdb := srv.Client(t)
	store := counts.NewStore(rdb)
	ctx := context.Background()
	a := livenessCleaner(t, srv.URL(), time.Minute)
	// Heartbeats slower than the grace, so a dropped connection can be
	// reaped between two of them.
	n := startLiveNode(t, srv, "blip", 400*time.Millisecond)
	n.rec.Add("app", "room", 4)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 4 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { _, ok := a.seenLiveCopy()["blip"]; return ok }, 5*time.Second, 10*time.Millisecond)
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
