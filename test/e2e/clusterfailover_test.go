package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// waitRole waits until the Redis server at addr answers with role (master
// or slave) in INFO replication and the Cluster, seen from every one of
// seen, has every slot served again.
func waitRole(t *testing.T, addr, role string, within time.Duration, seen ...*redistest.Server) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	waitFor(t, within, addr+" to be a "+role+" of a healthy Cluster", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:"+role) {
			return false
		}
		for _, s := range seen {
			sc := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
			state, err := sc.ClusterInfo(ctx).Result()
			_ = sc.Close()
			if err != nil || !strings.Contains(state, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
}

// TestClusterFailoverEndToEnd runs docs/OPERATIONS.md's Redis Cluster
// failovers under two wsnodes, a cleaner and an httpapi holding pusher-js
// clients: the primary of the app's slot gets a replica; a planned
// failover (CLUSTER FAILOVER on the replica, as before maintenance of the
// primary) moves the slot with nothing lost, then the new primary is
// SIGKILLed and the Cluster promotes the old one, now its replica. After
// each, the counts read through the HTTP API are exact within
// sentinelBound of the promotion, new clients are counted, nobody
// reconnected, and `cleaner audit` finds the counts consistent.
func TestClusterFailoverEndToEnd(t *testing.T) {
	c := redistest.NewCluster(t)
	ctx := context.Background()
	cc := c.Client(t)
	slot, err := cc.ClusterKeySlot(ctx, "{"+e2eAppID+"}").Result()
	require.NoError(t, err)
	ranges, err := cc.ClusterSlots(ctx).Result() //nolint:staticcheck // CLUSTER SHARDS needs Redis 7; SLOTS answers on every version the tests may meet
	require.NoError(t, err)
	primary := -1
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			for i, n := range c.Nodes {
				if n.Addr == r.Nodes[0].Addr {
					primary = i
				}
			}
		}
	}
	require.GreaterOrEqual(t, primary, 0, "the primary of slot %d", slot)
	replica := c.AddReplica(t, primary)
	var others []*redistest.Server
	for i, n := range c.Nodes {
		if i != primary {
			others = append(others, n)
		}
	}

	common := []string{"--redis-cluster", c.Seeds()}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	cl := startCleaner(t, "cleaner", common...)
	for _, n := range []node{a, b, cl} {
		waitReady(t, n.p, n.admin)
	}
	_, client := startAPI(t, common...)
	pusherClients(t, a.addr, 4, "room-a", "room-b")
	pusherClients(t, b.addr, 3, "room-a")
	want := map[string]int{"room-a": 7, "room-b": 4}
	waitCounts(t, client, want, 10*time.Second, "clients counted on the Cluster")
	connected := metric(a.admin, "headcount_wsnode_connections_total") + metric(b.admin, "headcount_wsnode_connections_total")

	// Planned: the replica takes over, the old primary becomes its replica.
	require.NoError(t, replica.Client(t).Do(ctx, "CLUSTER", "FAILOVER").Err())
	waitRole(t, replica.Addr, "master", 20*time.Second, others...)
	promoted := time.Now()
	waitCounts(t, client, want, sentinelBound, "counts after the planned failover")
	t.Logf("planned failover: counts exact %v after the promotion", time.Since(promoted).Round(time.Millisecond))
	pusherClients(t, a.addr, 2, "room-c")
	want["room-c"] = 2
	waitCounts(t, client, want, sentinelBound, "new clients counted on the new primary")
	connected += 2

	// Unplanned: the new primary dies; the Cluster promotes its replica.
	waitRole(t, c.Nodes[primary].Addr, "slave", 10*time.Second)
	killed := time.Now()
	replica.KillAndHold(t)
	waitRole(t, c.Nodes[primary].Addr, "master", 30*time.Second, others...)
	promoted = time.Now()
	t.Logf("unplanned failover: replica promoted %v after the primary's SIGKILL", promoted.Sub(killed).Round(time.Millisecond))
	waitCounts(t, client, want, sentinelBound, "counts after the unplanned failover")
	t.Logf("unplanned failover: counts exact %v after the promotion", time.Since(promoted).Round(time.Millisecond))
	pusherClients(t, b.addr, 2, "room-d")
	want["room-d"] = 2
	waitCounts(t, client, want, sentinelBound, "new clients counted after the unplanned failover")
	connected += 2

	require.Equal(t, connected, metric(a.admin, "headcount_wsnode_connections_total")+metric(b.admin, "headcount_wsnode_connections_total"),
		"a client reconnected")
	requireAudit(t, common...)
}
