package cleaner

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lifecycle"
)

// TestWatchBrokenPathReapsNobody: a node advertises a loopback proxy in
// front of its admin port. Cutting the proxy's connections (both sides
// closed, as a conntrack reset would) ends the watch while the node lives:
// Redis still holds its liveness subscription, so the cleaner counts the
// end as alive, reaps nothing, and watches the node again through the
// proxy.
func TestWatchBrokenPathReapsNobody(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	adminAddr, stopAdmin := livenessPort(t)
	t.Cleanup(stopAdmin)
	proxy := redistest.NewProxy(t, adminAddr)

	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	n := startLiveNodeAt(t, rdb, "node", 50*time.Millisecond, true, proxy.Addr())
	n.rec.Add("app", "room", 3)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 3 }, 5*time.Second, 5*time.Millisecond)

	a := livenessCleaner(t, srv.URL(), time.Minute)
	waitWatched(t, a, store, "node")
	watched := func() bool { return testutil.ToFloat64(a.m.watched) == 1 }
	require.Eventually(t, watched, 10*time.Second, 5*time.Millisecond, "the cleaner never watched the node")

	proxy.Partition()
	proxy.Heal() // closes both sides of every connection that lived through it
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.watchEnds.WithLabelValues(watchAlive)) == 1 },
		10*time.Second, 5*time.Millisecond, "the cut watch was not found alive")
	require.Eventually(t, watched, 10*time.Second, 5*time.Millisecond, "the cleaner did not watch the node again through the proxy")

	require.Zero(t, testutil.ToFloat64(a.m.watchEnds.WithLabelValues(watchDead)))
	for _, reason := range reasons {
		require.Zero(t, testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reason)), reason)
	}
	require.Equal(t, int64(3), channelsOf(t, store)["room"], "a broken path alone reaps nobody")
	nodes, err := store.WatchNodes(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, nodes, 1, "the node stays registered")
	require.Equal(t, proxy.Addr(), nodes[0].Address)
}

// TestWatchRestartedNodeUnderTheSameID: a watched node dies and is reaped
// through its watch's end; a new process under the same node id, at
// another admin address, is then neither reaped by that old watch nor left
// unwatched: the cleaner watches it afresh, its counts stay, and its own
// death is found by its own watch.
func TestWatchRestartedNodeUnderTheSameID(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	start := func() (*liveNode, func()) {
		adminAddr, stopAdmin := livenessPort(t)
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		n := startLiveNodeAt(t, rdb, "node", 50*time.Millisecond, true, adminAddr)
		var once sync.Once
		kill := func() { // as a SIGKILL: every connection closes at once
			once.Do(func() { n.stopLive(); n.stopRec(); stopAdmin() })
		}
		t.Cleanup(kill)
		return n, kill
	}

	first, killFirst := start()
	first.rec.Add("app", "room", 3)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 3 }, 5*time.Second, 5*time.Millisecond)
	cl := livenessCleaner(t, srv.URL(), time.Minute)
	waitWatched(t, cl, store, "node")
	watchReaps := func() float64 { return testutil.ToFloat64(cl.m.reaped.WithLabelValues("app", reasonWatch)) }
	require.Eventually(t, func() bool { return testutil.ToFloat64(cl.m.watched) == 1 }, 10*time.Second, 5*time.Millisecond)
	killFirst()
	require.Eventually(t, func() bool { return watchReaps() == 1 }, 10*time.Second, 5*time.Millisecond, "the first process's death was not found")
	require.Zero(t, channelsOf(t, store)["room"])
	// The time from the watch's end to exact counts is observed once, and
	// it is a time, not a date's distance.
	timed := func() (uint64, float64) {
		var m dto.Metric
		require.NoError(t, cl.m.watchReap.Write(&m))
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	n, sum := timed()
	require.Equal(t, uint64(1), n)
	require.Greater(t, sum, 0.0)
	require.Less(t, sum, 10.0)

	second, killSecond := start()
	second.rec.Add("app", "room", 5)
	waitWatched(t, cl, store, "node")
	require.Eventually(t, func() bool {
		nodes, err := store.WatchNodes(t.Context(), 10)
		require.NoError(t, err)
		return testutil.ToFloat64(cl.m.watched) == 1 && len(nodes) == 1 && channelsOf(t, store)["room"] == 5
	}, 10*time.Second, 5*time.Millisecond, "the restarted node is not watched, or its counts are missing")
	for _, reason := range reasons {
		want := 0.0
		if reason == reasonWatch {
			want = 1
		}
		require.Equal(t, want, testutil.ToFloat64(cl.m.reaped.WithLabelValues("app", reason)), "reaps for %s", reason)
	}
	require.Equal(t, int64(5), channelsOf(t, store)["room"])

	killSecond()
	require.Eventually(t, func() bool { return watchReaps() == 2 }, 10*time.Second, 5*time.Millisecond, "the restarted process's death was not found by its watch")
	require.Zero(t, channelsOf(t, store)["room"])
	n, _ = timed()
	require.Equal(t, uint64(2), n)
}

// livenessPort serves GET /liveness as a wsnode's admin port does, on a
// free loopback port; stop ends every watch held on it and closes the
// port, as the node's death would.
func livenessPort(t *testing.T) (addr string, stop func()) {
	t.Helper()
	done := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("/liveness", lifecycle.LivenessHandler(done))
	admin, err := lifecycle.Listen("127.0.0.1:0", mux, lifecycle.AdminTimeouts)
	require.NoError(t, err)
	go func() { _ = admin.Serve() }()
	var once sync.Once
	return admin.Addr(), func() { once.Do(func() { close(done); admin.Close() }) }
}

// TestWatchDeathWhileTheCleanerCannotTrustRedisYet: the liveness shard
// drops every subscription (CLIENT KILL TYPE pubsub, as a restart or a
// failover would), and a watched node dies just after the cleaner's own
// subscription is back, while missing subscriptions are not yet believed
// (livenessTrustAfter). The watch's end waits for that trust and then
// reaps the node: it is never counted unconfirmed, which would have left
// it to the watch's backoff (6 times on the code before).
func TestWatchDeathWhileTheCleanerCannotTrustRedisYet(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	store := counts.NewStore(rdb, keyspace.Space{})
	adminAddr, stopAdmin := livenessPort(t)
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	nodeRDB := redis.NewClient(opts)
	t.Cleanup(func() { _ = nodeRDB.Close() })
	n := startLiveNodeAt(t, nodeRDB, "node", 50*time.Millisecond, true, adminAddr)
	var once sync.Once
	kill := func() { once.Do(func() { n.stopLive(); n.stopRec(); stopAdmin() }) }
	t.Cleanup(kill)
	n.rec.Add("app", "room", 3)
	require.Eventually(t, func() bool { return channelsOf(t, store)["room"] == 3 }, 5*time.Second, 5*time.Millisecond)

	// Only its watch can reap within the test: its liveness check, which
	// would otherwise race the watch to the reap once Redis is trusted,
	// lists the nodes as the cleaner starts and then waits 20 s.
	cfg := config.DefaultCleaner()
	cfg.Redis, cfg.AdminAddr, cfg.LeaseTTL, cfg.DeadAfter = srv.URL(), "", 0, time.Minute
	cfg.LivenessInterval, cfg.LivenessGrace = 20*time.Second, 20*time.Second
	cl := runCleaner(t, cfg)
	waitWatched(t, cl, store, "node")
	require.Eventually(t, func() bool { return testutil.ToFloat64(cl.m.watched) == 1 }, 10*time.Second, 5*time.Millisecond)
	before := cl.canary.Since()
	require.NoError(t, rdb.ClientKillByFilter(t.Context(), "TYPE", "pubsub").Err())
	require.Eventually(t, func() bool { return cl.canary.Since().After(before) }, 10*time.Second, time.Millisecond,
		"the cleaner's liveness subscription did not come back")
	kill()
	require.Less(t, time.Since(cl.canary.Since()), livenessTrustAfter, "the node died after the trust came back: nothing tested")
	require.Eventually(t, func() bool { return testutil.ToFloat64(cl.m.reaped.WithLabelValues("app", reasonWatch)) == 1 },
		10*time.Second, 5*time.Millisecond, "the node's death was not found by its watch")
	require.Zero(t, channelsOf(t, store)["room"])
	require.Zero(t, testutil.ToFloat64(cl.m.watchEnds.WithLabelValues(watchUnconfirmed)), "a watch's end was left unconfirmed")
}
