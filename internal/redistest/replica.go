package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// AddReplica starts one more Cluster node, makes it a replica of
// c.Nodes[master] and returns it once it has synced and every master
// knows it, so a failover to it (CLUSTER FAILOVER on it, or the master's
// death) can be decided. It is not added to c.Nodes: Seeds stays the
// masters, and clients learn the replica from the Cluster.
func (c *Cluster) AddReplica(t testing.TB, master int) *Server {
	t.Helper()
	ctx := context.Background()
	node := startClusterNode(t)
	mc := c.Nodes[master].Client(t)
	// A full sync starts at once, not after the default 5 s wait for more
	// replicas.
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("config set on the master: %v", err)
	}
	masterID, err := mc.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("cluster myid: %v", err)
	}
	rc := node.Client(t)
	host, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
	if err := rc.ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatalf("cluster meet: %v", err)
	}
	waitFor(t, 20*time.Second, "the new node to know the masters", func() bool {
		info, err := rc.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes)+1))
	})
	waitFor(t, 20*time.Second, "the new node to become a replica", func() bool {
		return rc.ClusterReplicate(ctx, masterID).Err() == nil
	})
	waitFor(t, 20*time.Second, "the replica to sync", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	replicaID, err := rc.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatalf("cluster myid: %v", err)
	}
	for _, n := range c.Nodes {
		cl := n.Client(t)
		waitFor(t, 20*time.Second, n.Addr+" to know the replica", func() bool {
			nodes, err := cl.ClusterNodes(ctx).Result()
			if err != nil {
				return false
			}
			for _, line := range strings.Split(nodes, "\n") {
				if strings.HasPrefix(line, replicaID+" ") && strings.Contains(line, "slave "+masterID) {
					return true
				}
			}
			return false
		})
	}
	return node
}
