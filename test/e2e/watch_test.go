package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// TestWatchReapsASIGKILLedNodeAtOnce: with the cleaner's liveness check
// and dead-after made far longer than the test waits (liveness interval
// and grace 20 s, dead-after 60 s), a SIGKILLed wsnode's sockets still
// leave the counts within a few seconds: the cleaner's watch of its admin
// port ended when the kernel closed it, Redis confirmed its liveness
// subscription gone, and the cleaner reaped it as watch_ended. On a single
// Redis and on Redis Cluster.
func TestWatchReapsASIGKILLedNodeAtOnce(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.New(t)
		watchKillScenario(t, counts.NewStore(srv.Client(t), keyspace.Space{}), "--redis", srv.URL())
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t)
		watchKillScenario(t, counts.NewStore(c.Client(t), keyspace.Space{}), "--redis-cluster", c.Seeds())
	})
}

func watchKillScenario(t *testing.T, store *counts.Store, redis ...string) {
	victim, live := startWSNode(t, "ws-victim", redis...), startWSNode(t, "ws-live", redis...)
	want := subscribeBoth(t, store, victim, live)
	// Started after the nodes registered: it lists them as it becomes
	// active, and not again for 20 s.
	cl := startWatchingCleaner(t, redis...)
	waitMetricAtLeast(t, cl.admin, "headcount_cleaner_watched_nodes", 2, 10*time.Second)

	victim.p.kill(t)
	killed := time.Now()
	waitRedisCounts(t, store, want, 5*time.Second)
	t.Logf("SIGKILLed node gone from the counts after %v (liveness interval and grace 20 s, dead-after 60 s)", time.Since(killed).Round(time.Millisecond))
	waitReaped(t, cl.admin, "watch_ended")
	waitMetricAtLeast(t, cl.admin, "headcount_cleaner_watch_ends_total", 1, 2*time.Second, "result", "dead")
	if n := metricSum(cl.admin, "headcount_cleaner_watch_ends_total", "result", "alive"); n != 0 {
		t.Fatalf("watch_ends_total{result=alive} = %v: the live node's watch ended", n)
	}
}

// startWatchingCleaner starts a cleaner whose liveness check and dead-after
// cannot reap within a test (liveness interval and grace 20 s, dead-after
// 60 s), so only its watch can, and waits until it is active.
func startWatchingCleaner(t *testing.T, redis ...string) node {
	n := node{admin: freeAddr(t)}
	n.p = start(t, "cleaner", "cleaner", append(slices.Clone(redis), "--admin-addr", n.admin, "--dead-after", "60s",
		"--liveness-interval", "20s", "--liveness-grace", "20s", "--scan-interval", scanInterval.String(), "--lease-ttl", leaseTTL.String())...)
	waitReady(t, n.p, n.admin)
	waitMetricAtLeast(t, n.admin, "headcount_cleaner_active", 1, 10*time.Second)
	return n
}

// startUnwatchedWSNode starts a wsnode as startWSNode does, but without an
// admin port, so it advertises no address.
func startUnwatchedWSNode(t *testing.T, name string, redis ...string) node {
	n := node{addr: freeAddr(t)}
	n.p = start(t, name, "wsnode", append(slices.Clone(redis), "--addr", n.addr, "--admin-addr", "",
		"--node-id", name, "--heartbeat", heartbeat.String(), "--drain", drain.String())...)
	return n
}

// waitMetricAtLeast polls the sum of name's series with labels (name,
// value pairs; all if none) on admin until it is at least want.
func waitMetricAtLeast(t *testing.T, admin, name string, want float64, within time.Duration, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n := metricSum(admin, name, labels...)
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%q = %v after %v, want at least %v", name, labels, n, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
