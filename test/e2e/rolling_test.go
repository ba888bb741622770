package e2e

import (
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

const (
	// rollDrain is the wsnodes' --drain in the rolling tests: long enough
	// that the spread of the closes shows, short enough for the tests.
	rollDrain = 1500 * time.Millisecond
	// rollLag is how long after a client saw a change the count in Redis
	// may still lack it: a node gathers changes for 5 ms before a flush,
	// and the machine running the tests is shared.
	rollLag = 250 * time.Millisecond
)

// startRollingWSNode starts a wsnode named name with the suite's heartbeat
// and a drain window of rollDrain, plus extra flags.
func startRollingWSNode(t testing.TB, name string, extra ...string) node {
	n := node{addr: freeAddr(t), admin: freeAddr(t)}
	n.p = start(t, name, "wsnode", append(slices.Clone(extra), "--addr", n.addr, "--admin-addr", n.admin,
		"--node-id", name, "--heartbeat", heartbeat.String(), "--drain", rollDrain.String())...)
	return n
}

// drainNode takes n out of the balancer and SIGTERMs it, as the kubelet
// stops a pod that left the Service's endpoints (the balancer stops
// sending to it at once, so no preStop wait is needed here); it waits for
// the drain to end and requires exit code 0. It returns when the SIGTERM
// was sent and when the process ended.
func drainNode(t testing.TB, lb *balancer, n node) (sent, exited time.Time) {
	t.Helper()
	lb.remove(n.addr)
	sent = time.Now()
	n.p.signal(syscall.SIGTERM)
	require.Equal(t, 0, n.p.wait(t, rollDrain+20*time.Second), "%s exits 0 after its drain", n.p.name)
	return sent, time.Now()
}

// requireSpread requires the 4200 closes the fleet read between sent and
// exited to be at least want and spread over a third of the drain window
// at least: a node closes its sockets one by one over the window, so
// their clients do not all reconnect at once.
func requireSpread(t *testing.T, f *fleet, sent, exited time.Time, want int) {
	t.Helper()
	var closes []time.Time
	for _, c := range f.closes(4200, sent) {
		if !c.After(exited) {
			closes = append(closes, c)
		}
	}
	require.GreaterOrEqual(t, len(closes), want, "sockets closed with 4200 by the drain")
	spread := closes[len(closes)-1].Sub(closes[0])
	t.Logf("%d closes with 4200, the first %v after SIGTERM, spread over %v", len(closes),
		closes[0].Sub(sent).Round(time.Millisecond), spread.Round(time.Millisecond))
	require.GreaterOrEqual(t, spread, rollDrain/3, "the drain's closes were not spread over its window")
}

// requireAudit runs `cleaner audit` with flags, as an operator would,
// and requires it to find the counts consistent.
func requireAudit(t *testing.T, flags ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binaries(t), "cleaner"), append([]string{"audit"}, flags...)...).CombinedOutput()
	require.NoError(t, err, "cleaner audit:\n%s", out)
	require.Contains(t, string(out), "consistent")
}

// TestRollingUpgradeOfWsnodes runs the rolling upgrade of docs/OPERATIONS.md
// on two wsnodes behind a balancer standing in for the Service, replacing
// each in turn as the Deployment's RollingUpdate does (maxSurge,
// maxUnavailable 0): the new pod starts and becomes ready, then the old one
// leaves the endpoints and gets SIGTERM. Twelve clients that reconnect as
// pusher-js does and ten real pusher-js clients hold sockets throughout.
// What must hold: every count read through the HTTP API during the upgrade
// (one every 20 ms) lies between the sockets subscribed for the whole read
// and those open at any moment of it, allowing rollLag for a change to
// reach Redis; every socket the drains end is closed with 4200 and its
// client reconnects at once, the closes spread over the drain window; each
// old node exits 0 having removed its own counts, so the cleaner reaps
// nothing; the pusher-js clients are all counted on the new nodes; and
// `cleaner audit` finds the counts consistent.
func TestRollingUpgradeOfWsnodes(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL()}
	a, b := startRollingWSNode(t, "ws-a", common...), startRollingWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	_, client := startAPI(t, common...)

	lb := newBalancer(t, a.addr, b.addr)
	const goClients, jsClients = 12, 10
	f := startFleet(t, lb.Addr(), e2eAppKey, goClients, "roll-a", "roll-b")
	pusherClients(t, lb.Addr(), jsClients, "roll-js")
	f.waitSubscribed(t, 10*time.Second, "the clients subscribed")
	want := map[string]int{"roll-a": goClients, "roll-b": goClients, "roll-js": jsClients}
	waitCounts(t, client, want, 10*time.Second, "every client counted")

	poll := startPoller(t, client, f, rollLag, "roll-a", "roll-b")
	var next []node
	for _, old := range []node{a, b} {
		n := startRollingWSNode(t, old.p.name+"-v2", common...)
		waitReady(t, n.p, n.admin)
		lb.add(n.addr)
		next = append(next, n)
		sent, exited := drainNode(t, lb, old)
		t.Logf("%s drained in %v", old.p.name, exited.Sub(sent).Round(time.Millisecond))
		requireSpread(t, f, sent, exited, goClients/2)
		f.waitSubscribed(t, 5*time.Second, "the clients of "+old.p.name+" back")
		waitCounts(t, client, want, 5*time.Second, "every client counted again after "+old.p.name+"'s drain")
	}
	poll.requireExact(t, 50)
	f.requireNoProblems(t)

	open := 0.0
	for _, n := range next {
		open += metric(n.admin, "headcount_wsnode_connections_open")
	}
	require.EqualValues(t, goClients+jsClients, open, "every client, pusher-js's too, now on the new nodes")
	require.Zero(t, metricSum(cl.admin, "headcount_cleaner_reaped_nodes_total"), "a drained node removes its own counts: nothing to reap")
	requireAudit(t, common...)
}

// TestScaleWsnodesUpAndDown scales wsnodes out and in as
// docs/OPERATIONS.md says, behind a balancer standing in for the Service.
// Out: a second node becomes ready and joins the endpoints; it takes new
// connections (half of those that follow), and no open socket moves: no
// client reconnects. In: that node leaves the endpoints and drains as in a
// rolling upgrade; its clients reconnect at once to the remaining node.
// Throughout, every count read through the HTTP API (one every 20 ms) lies
// within the fleet's bounds, as in TestRollingUpgradeOfWsnodes; the cleaner
// reaps nothing and `cleaner audit` finds the counts consistent.
func TestScaleWsnodesUpAndDown(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	common := []string{"--redis", srv.URL()}
	a := startRollingWSNode(t, "ws-a", common...)
	cl := startCleaner(t, "cleaner", common...)
	for _, n := range []node{a, cl} {
		waitReady(t, n.p, n.admin)
	}
	_, client := startAPI(t, common...)

	lb := newBalancer(t, a.addr)
	const perWave, jsPerWave = 12, 6
	f := startFleet(t, lb.Addr(), e2eAppKey, perWave, "scale")
	pusherClients(t, lb.Addr(), jsPerWave, "scale-js")
	f.waitSubscribed(t, 10*time.Second, "the first clients subscribed")
	waitCounts(t, client, map[string]int{"scale": perWave, "scale-js": jsPerWave}, 10*time.Second, "the first clients counted")
	poll := startPoller(t, client, f, rollLag, "scale")

	// Out.
	b := startRollingWSNode(t, "ws-b", common...)
	waitReady(t, b.p, b.admin)
	lb.add(b.addr)
	f.grow(perWave)
	pusherClients(t, lb.Addr(), jsPerWave, "scale-js")
	f.waitSubscribed(t, 10*time.Second, "the second clients subscribed")
	want := map[string]int{"scale": 2 * perWave, "scale-js": 2 * jsPerWave}
	waitCounts(t, client, want, 10*time.Second, "every client counted after scaling out")
	require.Equal(t, 2*perWave, f.sockets(), "scaling out made a client reconnect")
	onB := metric(b.admin, "headcount_wsnode_connections_open")
	require.EqualValues(t, perWave/2+jsPerWave/2, onB, "the new node takes half the new connections")
	require.EqualValues(t, perWave+jsPerWave+perWave/2+jsPerWave/2, metric(a.admin, "headcount_wsnode_connections_open"),
		"the first node keeps every socket it had")

	// In.
	sent, exited := drainNode(t, lb, b)
	requireSpread(t, f, sent, exited, perWave/2)
	f.waitSubscribed(t, 5*time.Second, "the clients of ws-b back")
	waitCounts(t, client, want, 5*time.Second, "every client counted after scaling in")
	require.Equal(t, 2*perWave+perWave/2, f.sockets(), "only the drained node's clients reconnected")
	require.EqualValues(t, 2*(perWave+jsPerWave), metric(a.admin, "headcount_wsnode_connections_open"), "every client on the remaining node")

	poll.requireExact(t, 50)
	f.requireNoProblems(t)
	require.Zero(t, metricSum(cl.admin, "headcount_cleaner_reaped_nodes_total"), "a drained node removes its own counts: nothing to reap")
	requireAudit(t, common...)
}
