package e2e

import (
	"maps"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
)

// longDeadAfter is the cleaner's dead-after in the liveness tests: far
// longer than they wait, so only a closed connection explains a fast reap.
const longDeadAfter = 30 * time.Second

// TestSIGKILLedNodeLeavesCountsAtOnce: with dead-after at 30 s, a
// SIGKILLed wsnode that the cleaner does not watch (it has no admin port,
// so it advertises no address) still leaves the counts within 2 s (its
// Redis connections closed, so its liveness subscription vanished), on a
// single Redis and on Redis Cluster; the cleaner counts the reap as
// connection_closed. A watched node goes sooner: watch_test.go.
func TestSIGKILLedNodeLeavesCountsAtOnce(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.New(t)
		sigkillScenario(t, counts.NewStore(srv.Client(t), keyspace.Space{}), "--redis", srv.URL())
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.NewCluster(t)
		sigkillScenario(t, counts.NewStore(c.Client(t), keyspace.Space{}), "--redis-cluster", c.Seeds())
	})
}

func sigkillScenario(t *testing.T, store *counts.Store, redis ...string) {
	cl := startLivenessCleaner(t, longDeadAfter, redis...)
	victim, live := startUnwatchedWSNode(t, "ws-victim", redis...), startWSNode(t, "ws-live", redis...)
	want := subscribeBoth(t, store, victim, live)
	waitMetricAtLeast(t, cl.admin, "headcount_cleaner_watched_nodes", 1, 10*time.Second) // the live one

	victim.p.kill(t)
	killed := time.Now()
	waitRedisCounts(t, store, want, 2*time.Second)
	t.Logf("SIGKILLed node gone from the counts after %v (dead-after %v)", time.Since(killed).Round(time.Millisecond), longDeadAfter)
	waitReaped(t, cl.admin, "connection_closed")
	if n := reapedBy(cl.admin, "watch_ended"); n != 0 {
		t.Fatalf("reaped_nodes_total{reason=watch_ended} = %v for a node that was not watched", n)
	}
}

// TestSIGSTOPpedNodeWaitsForDeadAfter: a stopped process keeps its TCP
// connections, so its liveness subscription stays: it is reaped at
// dead-after by its stale heartbeat, not before, and on SIGCONT it
// republishes its counts.
func TestSIGSTOPpedNodeWaitsForDeadAfter(t *testing.T) {
	srv := redistest.New(t)
	store := counts.NewStore(srv.Client(t), keyspace.Space{})
	redis := []string{"--redis", srv.URL()}
	const deadAfter = 3 * time.Second
	cl := startLivenessCleaner(t, deadAfter, redis...)
	victim, live := startWSNode(t, "ws-victim", redis...), startWSNode(t, "ws-live", redis...)
	want := subscribeBoth(t, store, victim, live)
	all := doubled(want)

	victim.p.signal(syscall.SIGSTOP)
	stopped := time.Now()
	for time.Since(stopped) < deadAfter-600*time.Millisecond { // its last heartbeat was up to 250 ms before
		got, err := store.Channels(t.Context(), e2eAppID, "")
		if err == nil && !maps.Equal(got, all) {
			victim.p.signal(syscall.SIGCONT)
			t.Fatalf("the stopped node left the counts %v after SIGSTOP, before dead-after %v", time.Since(stopped).Round(time.Millisecond), deadAfter)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitRedisCounts(t, store, want, 2*time.Second)
	t.Logf("SIGSTOPped node reaped after %v (dead-after %v)", time.Since(stopped).Round(time.Millisecond), deadAfter)
	waitReaped(t, cl.admin, "heartbeat_stale")
	victim.p.signal(syscall.SIGCONT)
	waitRedisCounts(t, store, all, 5*time.Second)
}

// startLivenessCleaner starts a cleaner with dead-after deadAfter, the
// default liveness check, and the suite's scan interval and lease TTL. It
// waits until the cleaner is active and its own liveness subscription can
// be trusted (it must have held for a second).
func startLivenessCleaner(t *testing.T, deadAfter time.Duration, redis ...string) node {
	n := node{admin: freeAddr(t)}
	n.p = start(t, "cleaner", "cleaner", append(redis, "--admin-addr", n.admin,
		"--dead-after", deadAfter.String(), "--scan-interval", scanInterval.String(), "--lease-ttl", leaseTTL.String())...)
	waitReady(t, n.p, n.admin)
	deadline := time.Now().Add(10 * time.Second)
	for metric(n.admin, "headcount_cleaner_active") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the cleaner never became active")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1200 * time.Millisecond)
	return n
}

// subscribeBoth opens 20 sockets over 5 channels on each of two nodes,
// waits until Redis counts them all, and returns one node's share.
func subscribeBoth(t *testing.T, store *counts.Store, a, b node) map[string]int64 {
	want := map[string]int64{}
	for _, n := range []node{a, b} {
		if n.admin == "" { // no admin port: the WebSocket port's /up says the same
			waitOK(t, n.p, "http://"+n.addr+"/up", 20*time.Second)
		} else {
			waitReady(t, n.p, n.admin)
		}
		for i := range 20 {
			openSubscribed(t, n.addr, "live-"+strconv.Itoa(i%5))
		}
	}
	for i := range 20 {
		want["live-"+strconv.Itoa(i%5)]++
	}
	waitRedisCounts(t, store, doubled(want), 10*time.Second)
	// The cleaner names every node, and so learns which it saw subscribed,
	// every fifth check (500 ms); leave room for a slow machine.
	time.Sleep(1500 * time.Millisecond)
	return want
}

func doubled(m map[string]int64) map[string]int64 {
	out := maps.Clone(m)
	for k := range out {
		out[k] *= 2
	}
	return out
}

// reapedBy sums headcount_cleaner_reaped_nodes_total over apps for reason.
func reapedBy(admin, reason string) float64 {
	return metricSum(admin, "headcount_cleaner_reaped_nodes_total", "reason", reason)
}

// waitReaped waits until the cleaner at admin has counted one reap for
// reason: the counts change in Redis a moment before the cleaner, which
// reads the result, counts the reap.
func waitReaped(t *testing.T, admin, reason string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n := reapedBy(admin, reason)
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reaped_nodes_total{reason=%s} = %v after 2s, want 1", reason, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
