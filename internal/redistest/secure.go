package redistest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// SecureCluster is a 3-master Redis Cluster whose nodes need a password,
// for the default user and for an ACL user of its own.
type SecureCluster struct {
	*Cluster
	User, Password string
}

// NewSecureCluster starts a Cluster (NewCluster), then sets requirepass
// and masterauth on every node and adds the ACL user with every right.
// The Cluster's own Client and its nodes' Client no longer work; use
// SecureCluster.Client.
func NewSecureCluster(t testing.TB, user, password string) *SecureCluster {
	t.Helper()
	c := NewCluster(t)
	ctx := context.Background()
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		for _, cmd := range [][]any{
			{"ACL", "SETUSER", user, "on", ">" + password, "~*", "&*", "+@all"},
			{"CONFIG", "SET", "masterauth", password},
			{"CONFIG", "SET", "requirepass", password},
		} {
			if err := cl.Do(ctx, cmd...).Err(); err != nil {
				_ = cl.Close()
				t.Fatalf("secure cluster node %s: %v: %v", n.Addr, cmd[:2], err)
			}
		}
		_ = cl.Close()
	}
	return &SecureCluster{Cluster: c, User: user, Password: password}
}

// URL returns the cluster as one redis:// URL, with the ACL user and
// password and every node after the first as an addr= parameter, the form
// --redis-cluster takes (redis.ParseClusterURL).
func (c *SecureCluster) URL() string {
	u := url.URL{Scheme: "redis", User: url.UserPassword(c.User, c.Password), Host: c.Nodes[0].Addr}
	q := url.Values{}
	for _, n := range c.Nodes[1:] {
		q.Add("addr", n.Addr)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Client returns a cluster client logged in as the ACL user, closed when
// the test ends.
func (c *SecureCluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(c.Seeds(), ","), Username: c.User, Password: c.Password})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// String names the cluster without its password.
func (c *SecureCluster) String() string {
	return fmt.Sprintf("secure cluster %s (user %s)", c.Seeds(), c.User)
}
