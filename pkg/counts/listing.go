package counts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
)

// Listings is the read side the HTTP API serves beyond single counts. This
// file holds the reader, its options and how fresh each answer is
// (Freshness); channel.go one channel's counts and the leaderboard (Channel,
// Top); paging.go walks over a frozen snapshot (Page); shared_listing.go
// full listings computed once across every httpapi replica
// (SharedListing). Every read is one MULTI (or one script) on the app's
// slot, so it runs unchanged on Redis Cluster and its parts agree with each
// other.

// Defaults of ListingOptions.
const (
	DefaultStaleAfter        = 3 * time.Second
	DefaultListingCacheTTL   = time.Second
	DefaultListingLockTTL    = 500 * time.Millisecond
	DefaultSnapshotIdleTTL   = 15 * time.Second
	DefaultSnapshotReuse     = 2 * time.Second
	DefaultListingScanCount  = 500
	defaultMaxListingBackoff = 20 * time.Millisecond
)

// ListingOptions tunes a Listings; zero values take the defaults.
type ListingOptions struct {
	// Keyspace holds the counts to read; the zero Keyspace has the
	// default prefix.
	Keyspace keyspace.Space
	// StaleAfter is the last-seen age from which Freshness counts a node as
	// stale (dead-looking, awaiting the cleaner). Default 3s, the cleaner's
	// default dead-after.
	StaleAfter time.Duration
	// CacheTTL is how long a shared full listing is served from Redis; a
	// listing is at most this old. Negative disables the shared cache (every
	// full listing is read directly). Default 1s.
	CacheTTL time.Duration
	// LockTTL bounds how long a computation may hold the single-flight lock:
	// if its replica dies, the others wait at most this long before one of
	// them computes. It must be below CacheTTL. Default 500ms.
	LockTTL time.Duration
	// SnapshotIdleTTL is how long a paging walk's snapshot outlives its last
	// page read; a cursor older than that is ErrCursorExpired. Default 15s.
	SnapshotIdleTTL time.Duration
	// SnapshotReuse is how long at least a new snapshot is shared by the
	// walks that start after it (ten times its copy's length if longer), so
	// a client starting walks in a loop costs one O(n) copy (in bounded
	// slices) per window. Default 2s.
	SnapshotReuse time.Duration
	// ScanCount is how many channels one command of a full listing or a
	// snapshot copy reads (ZSCAN COUNT): the bound on how long one read
	// holds Redis. Default 500.
	ScanCount int
}

func (o ListingOptions) withDefaults() ListingOptions {
	if o.StaleAfter <= 0 {
		o.StaleAfter = DefaultStaleAfter
	}
	if o.CacheTTL == 0 {
		o.CacheTTL = DefaultListingCacheTTL
	}
	if o.LockTTL <= 0 {
		o.LockTTL = DefaultListingLockTTL
	}
	if o.CacheTTL > 0 && o.LockTTL >= o.CacheTTL {
		// The lock must expire before the cache: a result is then
		// always there for the waiters of a lock that was released in time.
		o.LockTTL = o.CacheTTL / 2
	}
	if o.SnapshotIdleTTL <= 0 {
		o.SnapshotIdleTTL = DefaultSnapshotIdleTTL
	}
	if o.SnapshotReuse <= 0 {
		o.SnapshotReuse = DefaultSnapshotReuse
	}
	if o.ScanCount <= 0 {
		o.ScanCount = DefaultListingScanCount
	}
	return o
}

// Listings reads leaderboards, pages and shared full listings of every app.
// It is safe for concurrent use.
type Listings struct {
	keys
	rdb  redis.UniversalClient
	opts ListingOptions
}

// NewListings returns a reader on rdb.
func NewListings(rdb redis.UniversalClient, opts ListingOptions) *Listings {
	return &Listings{keys: keys{ks: opts.Keyspace, seen: &reapsSeen{}}, rdb: rdb, opts: opts.withDefaults()}
}

// Options returns the options in effect (defaults filled in).
func (l *Listings) Options() ListingOptions { return l.opts }

// Freshness says how far an answer may be from the truth. Counts in Redis
// lag a node by at most its flush window, except for a node that died:
// its contribution stays until the cleaner starts reaping it (dead-after
// plus a scan interval; reads leave it out from then on, see exact.go). All times come from the clock of the Redis shard holding the
// app, the one the nodes' last-seen times were stamped with.
type Freshness struct {
	// ReadAt is when the counts were read (Redis's clock).
	ReadAt time.Time
	// Nodes is how many wsnodes were registered for the app.
	Nodes int
	// OldestHeartbeat is how old the oldest last-seen among them was at
	// ReadAt (0 without nodes). Below the cleaner's dead-after, every
	// registered node was alive recently and the counts are exact up to
	// flush windows.
	OldestHeartbeat time.Duration
	// Stale is how many of them had not been seen for StaleAfter: probably
	// dead, their sockets still counted until the cleaner starts reaping
	// them.
	Stale int
}

// queueFreshness queues fresh.lua on p; parse with freshnessOf.
func (l *Listings) queueFreshness(ctx context.Context, p redis.Pipeliner, app string) *redis.Cmd {
	// EVAL, not EVALSHA: inside MULTI a NOSCRIPT would only surface at EXEC.
	// The script is a few hundred bytes and Redis caches it by its hash.
	return p.Eval(ctx, freshScript.Source(), []string{l.nodesKey(app)}, l.opts.StaleAfter.Milliseconds())
}

func freshnessOf(cmd *redis.Cmd) (Freshness, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return Freshness{}, fmt.Errorf("read freshness: %w", err)
	}
	return freshnessFrom(v)
}

func freshnessFrom(v []int64) (Freshness, error) {
	if len(v) != 4 {
		return Freshness{}, fmt.Errorf("read freshness: %d values, want 4", len(v))
	}
	return Freshness{
		ReadAt:          time.UnixMilli(v[0]),
		Nodes:           int(v[1]),
		OldestHeartbeat: time.Duration(max(v[0]-v[2], 0)) * time.Millisecond,
		Stale:           int(v[3]),
	}, nil
}

// Freshness reads how fresh app's counts are right now.
func (l *Listings) Freshness(ctx context.Context, app string) (Freshness, error) {
	var fresh *redis.Cmd
	if _, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		fresh = l.queueFreshness(ctx, p, app)
		return nil
	}); err != nil {
		return Freshness{}, fmt.Errorf("read freshness: %w", err)
	}
	return freshnessOf(fresh)
}

// execTx runs queue's commands and the freshness read in one MULTI on the
// app's slot. A missing key (redis.Nil) is not an error here: each caller
// reads its own commands.
func (l *Listings) execTx(ctx context.Context, app, what string, queue func(p redis.Pipeliner)) (Freshness, error) {
	var fresh *redis.Cmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		queue(p)
		fresh = l.queueFreshness(ctx, p, app)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Freshness{}, fmt.Errorf("%s: %w", what, err)
	}
	f, err := freshnessOf(fresh)
	if err != nil {
		return Freshness{}, fmt.Errorf("%s: %w", what, err)
	}
	return f, nil
}
