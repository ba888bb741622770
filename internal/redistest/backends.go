package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// Backend is one of the two deployments a package's Redis tests run
// against: a single server or a 3-master Cluster (one of the two is set).
type Backend struct {
	Single  *Server
	Cluster *Cluster
}

// Client returns a new client of b's Redis, closed at the test's end; each
// call is its own client, as separate processes would have.
func (b Backend) Client(t testing.TB) redis.UniversalClient {
	if b.Cluster != nil {
		return b.Cluster.Client(t)
	}
	return b.Single.Client(t)
}

// Each runs f as the subtests "single" (one redis-server) and "cluster" (a
// 3-master Cluster), so every atomic unit is tested where keys may live on
// different shards. Skipped with -short: both start redis-server.
func Each(t *testing.T, f func(t *testing.T, b Backend)) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server (skipped with -short)")
	}
	t.Run("single", func(t *testing.T) { f(t, Backend{Single: New(t)}) })
	t.Run("cluster", func(t *testing.T) { f(t, Backend{Cluster: NewCluster(t)}) })
}

// Backends is Each for a test that needs one client of each deployment.
func Backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	Each(t, func(t *testing.T, b Backend) { f(t, b.Client(t)) })
}
