package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// startAPI starts an httpapi with extra flags and waits until it is ready.
func startAPI(t testing.TB, extra ...string) (node, *pusher.Client) {
	t.Helper()
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(extra, "--addr", api.addr, "--admin-addr", api.admin)...)
	waitReady(t, api.p, api.admin)
	return api, &pusher.Client{AppID: "app-id", Key: "app-key", Secret: "app-secret", Host: api.addr}
}

// TestTLSRedis: wsnode, cleaner and httpapi run unchanged against a
// redis-server that speaks TLS only and requires client certificates,
// given the test CA and a client certificate by flags.
func TestTLSRedis(t *testing.T) {
	t.Parallel()
	files := redistest.NewTLSFiles(t)
	srv := redistest.NewTLS(t, files, "yes")
	common := []string{"--redis", srv.URL(), "--redis-tls-ca", files.CA, "--redis-tls-cert", files.ClientCert, "--redis-tls-key", files.ClientKey}
	a := startWSNode(t, "ws-a", common...)
	cl := startCleaner(t, "cleaner-1", common...)
	for _, n := range []node{a, cl} {
		waitReady(t, n.p, n.admin)
	}
	_, client := startAPI(t, common...)
	pusherClients(t, a.addr, 3, "room-a", "room-b")
	waitCounts(t, client, map[string]int{"room-a": 3, "room-b": 3}, 10*time.Second, "clients counted through TLS")
}

// TestPasswordClusterEndToEnd: the binaries reach a 3-master Cluster that
// requires a password, named by one URL with an ACL user (the URL form of
// --redis-cluster): the wsnodes turn ready (their event fan-out is
// subscribed), counts and the reaping of a SIGKILLed node work, and no
// process logs the password.
func TestPasswordClusterEndToEnd(t *testing.T) {
	t.Parallel()
	sc := redistest.NewSecureCluster(t, "headcount", "cluster-secret-1")
	common := []string{"--redis-cluster", sc.URL()}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner-1", common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	api, client := startAPI(t, common...)
	pusherClients(t, a.addr, 2, "room-a")
	pusherClients(t, b.addr, 3, "room-a", "room-b")
	waitCounts(t, client, map[string]int{"room-a": 5, "room-b": 3}, 10*time.Second, "clients counted on a Cluster with a password")
	b.p.kill(t)
	waitCounts(t, client, map[string]int{"room-a": 2}, deadAfter+scanInterval+time.Second+heartbeat, "ws-b's counts removed")
	noPassword(t, sc.Password, a.p, b.p, cl.p, api.p)
}

// noPassword fails t if any of procs logged password.
func noPassword(t *testing.T, password string, procs ...*proc) {
	t.Helper()
	for _, p := range procs {
		log, err := os.ReadFile(p.log)
		require.NoError(t, err)
		require.NotContains(t, string(log), password, "%s logged the Redis password", p.name)
	}
}

// sentinelBound is how long after the sentinels promote the replica the
// counts must be exact again: the nodes' flushes that failed meanwhile are
// retried (with backoff up to the heartbeat) as full replaces once the
// failover client finds the new master.
const sentinelBound = 5 * time.Second

// TestSentinelFailoverEndToEnd: two wsnodes, a cleaner and an httpapi find
// a password-protected master through three sentinels. The master is
// SIGKILLed once the replica has every write (pkg/redisx's
// TestSentinelFailoverHealsALostWrite covers a write it missed); within
// sentinelBound of the promotion the counts are exact again, new clients
// are counted on the new master, and a SIGKILLed node is reaped there. No
// process logs the password.
func TestSentinelFailoverEndToEnd(t *testing.T) {
	s := redistest.NewSentinels(t, "master-secret-1")
	common := []string{"--redis-sentinel", s.Addrs(), "--redis-sentinel-master", redistest.SentinelMaster, "--redis-password", s.Password}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner-1", common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	api, client := startAPI(t, common...)
	pusherClients(t, a.addr, 4, "room-a", "room-b")
	pusherClients(t, b.addr, 3, "room-a")
	waitCounts(t, client, map[string]int{"room-a": 7, "room-b": 4}, 10*time.Second, "clients counted through Sentinel")

	s.WaitReplicated(t)
	killed := time.Now()
	s.Master.Kill()
	s.WaitFailover(t, 20*time.Second)
	promoted := time.Now()
	t.Logf("replica promoted %v after the master's SIGKILL", promoted.Sub(killed).Round(time.Millisecond))
	pusherClients(t, a.addr, 2, "room-c")
	waitCounts(t, client, map[string]int{"room-a": 7, "room-b": 4, "room-c": 2}, sentinelBound, "counts after the failover")
	t.Logf("counts exact %v after the promotion", time.Since(promoted).Round(time.Millisecond))

	killed = time.Now()
	b.p.kill(t)
	waitCounts(t, client, map[string]int{"room-a": 4, "room-b": 4, "room-c": 2}, deadAfter+scanInterval+time.Second+heartbeat,
		"ws-b's counts removed on the new master")
	t.Logf("ws-b SIGKILLed: counts exact again after %v", time.Since(killed).Round(time.Millisecond))

	noPassword(t, s.Password, a.p, b.p, cl.p, api.p)
}
