package counts

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Store reads and maintains the counts of every app in Redis.
type Store struct{ rdb redis.UniversalClient }

// NewStore returns a store on rdb.
func NewStore(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// Channel returns the global subscription count of one channel (0: vacant).
func (s *Store) Channel(ctx context.Context, app, channel string) (int64, error) { panic("todo") }

// Channels returns the occupied channels of app whose name starts with
// prefix, with their global subscription counts.
func (s *Store) Channels(ctx context.Context, app, prefix string) (map[string]int64, error) {
	panic("todo")
}

// RecorderOptions tunes a node's Recorder.
type RecorderOptions struct {
	// Heartbeat is how often the node refreshes its last-seen time.
	Heartbeat time.Duration
	// Coalesce is how long changes gather before one flush; 0 flushes each
	// change on its own (benchmarks compare the two).
	Coalesce time.Duration
	Logger   hclog.Logger
	// Registerer receives the recorder's metrics; nil means none.
	Registerer prometheus.Registerer
}

// Recorder is one wsnode's view of its own counts: it keeps the node's local
// truth and publishes it to Redis as the node's contribution.
type Recorder struct{}

// NewRecorder returns a recorder for node nodeID.
func NewRecorder(rdb redis.UniversalClient, nodeID string, opts RecorderOptions) *Recorder {
	panic("todo")
}

// Add records that the node's subscriptions to channel of app changed by
// delta. It never blocks on Redis.
func (r *Recorder) Add(app, channel string, delta int64) { panic("todo") }

// Run flushes changes and heartbeats until ctx ends.
func (r *Recorder) Run(ctx context.Context) error { panic("todo") }

// Healthy reports whether the last write to Redis succeeded.
func (r *Recorder) Healthy() bool { panic("todo") }

// Remove deletes this node's contribution from every app (graceful stop).
func (r *Recorder) Remove(ctx context.Context) error { panic("todo") }
