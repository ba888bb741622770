package e2e

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
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
	checkDeathAnnouncedFirst(t, victim)

	anchor := checkAnchored(t, victim)

	victim.p.kill(t)
	killed := time.Now()
	waitRedisCounts(t, store, want, 5*time.Second)
	t.Logf("SIGKILLed node gone from the counts after %v (liveness interval and grace 20 s, dead-after 60 s)", time.Since(killed).Round(time.Millisecond))
	waitReaped(t, cl.admin, "watch_ended")
	waitGone(t, anchor)
	waitMetricAtLeast(t, cl.admin, "headcount_cleaner_watch_ends_total", 1, 2*time.Second, "result", "dead")
	if n := metricSum(cl.admin, "headcount_cleaner_watch_ends_total", "result", "alive"); n != 0 {
		t.Fatalf("watch_ends_total{result=alive} = %v: the live node's watch ended", n)
	}
	// Killed within the cleaner's first second, before it believes a
	// missing subscription: it waits for that, not for its backoff.
	if n := metricSum(cl.admin, "headcount_cleaner_watch_ends_total", "result", "unconfirmed"); n != 0 {
		t.Fatalf("watch_ends_total{result=unconfirmed} = %v: the death waited for the watch's backoff", n)
	}
	// The victim's one app: one time from the watch's end to exact counts,
	// within the seconds the counts took to read exact here.
	if n := metricSum(cl.admin, "headcount_cleaner_watch_reap_seconds_count"); n != 1 {
		t.Fatalf("watch_reap_seconds_count = %v, want 1", n)
	}
	if s := metricSum(cl.admin, "headcount_cleaner_watch_reap_seconds_sum"); s <= 0 || s > time.Since(killed).Seconds() {
		t.Fatalf("watch_reap_seconds_sum = %v s, not within the %v since the kill", s, time.Since(killed))
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

// checkDeathAnnouncedFirst checks that every connection of n's other than
// its client sockets (its Redis connections, the cleaner's watch of its
// admin port) has a descriptor above every client socket's: a kill closes
// the highest first (package exitorder), so those announce the death
// before the client sockets are closed.
func checkDeathAnnouncedFirst(t *testing.T, n node) {
	t.Helper()
	pid := strconv.Itoa(n.p.cmd.Process.Pid)
	fds := map[string]int{} // socket inode: its highest descriptor
	ents, err := os.ReadDir("/proc/" + pid + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		link, _ := os.Readlink("/proc/" + pid + "/fd/" + e.Name())
		inode, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		inode = strings.TrimSuffix(inode, "]")
		fds[inode] = max(fds[inode], fd)
	}
	_, wsPort, _ := net.SplitHostPort(n.addr)
	clients, others := -1, []int{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + pid + "/net/" + table)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] == "0A" { // 0A: listening
				continue
			}
			fd, ok := fds[f[9]]
			if !ok {
				continue
			}
			_, local, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseUint(local, 16, 16)
			if strconv.FormatUint(port, 10) == wsPort {
				clients = max(clients, fd)
			} else {
				others = append(others, fd)
			}
		}
	}
	if clients < 0 || len(others) < 2 {
		t.Fatalf("%s: client sockets up to fd %d, other connections at %v: expected client sockets, Redis connections and a watch", n.p.name, clients, others)
	}
	for _, fd := range others {
		if fd < clients {
			t.Fatalf("%s: a Redis or admin connection at fd %d, below a client socket at %d (all: %v): a kill would close it late", n.p.name, fd, clients, others)
		}
	}
}

// checkAnchored checks that n has its exit anchor (package exitorder): a
// child process named wsnode-anchor sharing n's descriptors, and one named
// wsnode-memory sharing its memory, so a kill of n shuts its Redis and
// admin connections down at once and frees its memory after the closes.
// It returns the anchor's pid. The two name themselves once they run,
// which a loaded machine may delay: it polls.
func checkAnchored(t *testing.T, n node) int {
	t.Helper()
	parent := n.p.cmd.Process.Pid
	missing := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		found := map[string]int{}
		for name, pid := range proctest.Children(parent) {
			files, _ := proctest.SharesFiles(parent, pid)
			memory, _ := proctest.SharesMemory(parent, pid)
			if name == "wsnode-anchor" && files && !memory || name == "wsnode-memory" && memory && !files {
				found[name] = pid
			}
		}
		if found["wsnode-anchor"] != 0 && found["wsnode-memory"] != 0 {
			return found["wsnode-anchor"]
		}
		missing = fmt.Sprintf("found %v, want wsnode-anchor sharing its descriptors and wsnode-memory sharing its memory", found)
	}
	t.Fatalf("%s (pid %d): %s", n.p.name, parent, missing)
	return 0
}

// waitGone waits until process pid has exited (a zombie counts: its new
// parent reaps it).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if state, _ := proctest.Status(pid, "State"); state == "" || strings.HasPrefix(state, "Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs 10 s after its parent was killed", pid)
		}
	}
}
