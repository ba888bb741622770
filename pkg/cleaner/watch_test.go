package cleaner

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
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
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	done := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle("/liveness", lifecycle.LivenessHandler(done))
	admin, err := lifecycle.Listen("127.0.0.1:0", mux, lifecycle.AdminTimeouts)
	require.NoError(t, err)
	go func() { _ = admin.Serve() }()
	t.Cleanup(func() { close(done); admin.Close() })
	proxy := redistest.NewProxy(t, admin.Addr())

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
