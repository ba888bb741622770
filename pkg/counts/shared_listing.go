package counts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
)

// flight.lua's answers, which it reads under the names flightPrelude
// declares (scripts.go).
const (
	flightWait    = 0 // another caller computes the listing: wait
	flightCached  = 1 // a cached listing: use it
	flightCompute = 2 // the lock is taken: compute the listing
)

// scanChannels hands each occupied channel of app whose name matches the
// glob match ("" for all) to each, ScanCount at a time, with its count
// when that slice was read, leaving out what the reaps under way held then
// (scan.lua: a ZSCAN step and the reaping hashes in one script, each
// bounded, whatever the app's size). A channel occupied throughout is
// handed over at least once (ZSCAN may repeat one); one occupied or
// vacated meanwhile may be missed.
func (l *Listings) scanChannels(ctx context.Context, app, match string, each func([]redis.Z) error) error {
	var cursor uint64
	for {
		v, err := l.runExact(ctx, l.rdb, scanScript, app, []string{l.globalKey(app)}, strconv.FormatUint(cursor, 10), match, l.opts.ScanCount)
		if err != nil {
			return fmt.Errorf("scan channels: %w", err)
		}
		next, page, err := scanOf(v)
		if err != nil {
			return fmt.Errorf("scan channels: %w", err)
		}
		if len(page) > 0 {
			if err := each(page); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// ListingQuery names one variant of an app's full listing.
type ListingQuery struct {
	// Prefix keeps the channels whose names start with it.
	Prefix string
	// Users asks for each channel's distinct presence users.
	Users bool
}

// variant is a fixed-length key part for q; the version changes when the
// cached value's format does, so replicas of two versions never mix.
func (q ListingQuery) variant() string {
	h := sha256.Sum256([]byte(fmt.Sprintf("v1\x00%t\x00%s", q.Users, q.Prefix)))
	return hex.EncodeToString(h[:12])
}

// Listing is one full read of an app's occupied channels.
type Listing struct {
	// Channels maps each occupied channel with the prefix to its count.
	Channels map[string]int64
	// Users maps each of them to its distinct users when Users was asked.
	Users map[string]int64
	// Fresh is how fresh the read was.
	Fresh Freshness
	// occupied counts every occupied channel of the app, prefix or not: a
	// cached listing is reused only while that number is unchanged.
	occupied int64
}

// ReadListing reads app's occupied channels with q's prefix, with their
// counts (and users if asked), directly from Redis, ScanCount channels per
// command (see scanChannels): each count is exact when its slice was read,
// and a channel occupied throughout the read is listed once. O(n) in
// round trips of bounded size.
func (l *Listings) ReadListing(ctx context.Context, app string, q ListingQuery) (Listing, error) {
	var occupied *redis.IntCmd
	f, err := l.execTx(ctx, app, "list channels", func(p redis.Pipeliner) {
		occupied = p.ZCard(ctx, l.globalKey(app))
	})
	if err != nil {
		return Listing{}, err
	}
	out := Listing{Channels: map[string]int64{}, Fresh: f, occupied: occupied.Val()}
	match := ""
	if q.Prefix != "" {
		match = keyspace.GlobEscape(q.Prefix) + "*"
	}
	if err := l.scanChannels(ctx, app, match, func(page []redis.Z) error {
		for _, z := range page {
			if name, _ := z.Member.(string); strings.HasPrefix(name, q.Prefix) {
				out.Channels[name] = int64(z.Score)
			}
		}
		return nil
	}); err != nil {
		return Listing{}, fmt.Errorf("list channels: %w", err)
	}
	if q.Users && len(out.Channels) > 0 {
		// Presence members live in one hash per channel. The users may be
		// a moment newer than the channel counts.
		names := make([]string, 0, len(out.Channels))
		for name := range out.Channels {
			names = append(names, name)
		}
		s := Store{keys: l.keys, rdb: l.rdb}
		if out.Users, err = s.UserCounts(ctx, app, names); err != nil {
			return Listing{}, err
		}
	}
	return out, nil
}

// Source says where a shared listing came from.
type Source string

// Sources of a SharedResult.
const (
	// Computed: this caller read Redis (holding the lock, or with the cache off).
	Computed Source = "computed"
	// Cached: a result another request computed was in the cache.
	Cached Source = "cached"
	// Waited: another request was computing; this caller waited for its result.
	Waited Source = "waited"
)

// SharedResult is an encoded full listing.
type SharedResult struct {
	Body   []byte
	Fresh  Freshness
	Source Source
	// Age is how long before the answer the counts were read (Redis's
	// clock): 0 when Computed, at most CacheTTL otherwise.
	Age time.Duration
}

// SharedListing returns app's full listing for q, encoded by encode, computed
// at most once at a time across every process sharing this Redis:
//
//   - A cached result is used while it is younger than CacheTTL and the app
//     has as many occupied channels and registered nodes as when it was
//     read (so a channel vacated or occupied invalidates it at once, unless
//     another changed the other way within the TTL, and so does a node's
//     death: its reap's first unit unregisters it, and the reads leave its
//     sockets out from then).
//   - Otherwise the first caller takes a lock (SET NX PX LockTTL), reads,
//     encodes, caches the result and releases the lock; every concurrent
//     caller for the same app and q, on any replica, polls with a bounded
//     backoff and uses the result it waited for.
//   - If the lock holder dies, its lock expires after LockTTL and the next
//     poll of a waiter takes it and computes: nobody waits forever.
//
// encode must be deterministic in its input; it runs only in the computing
// caller. With CacheTTL negative, SharedListing reads and encodes directly.
func (l *Listings) SharedListing(ctx context.Context, app string, q ListingQuery, encode func(Listing) ([]byte, error)) (SharedResult, error) {
	compute := func() (Listing, []byte, error) {
		ls, err := l.ReadListing(ctx, app, q)
		if err != nil {
			return ls, nil, err
		}
		body, err := encode(ls)
		if err != nil {
			return ls, nil, fmt.Errorf("encode listing: %w", err)
		}
		return ls, body, nil
	}
	if l.opts.CacheTTL < 0 {
		ls, body, err := compute()
		return SharedResult{Body: body, Fresh: ls.Fresh, Source: Computed}, err
	}
	variant := q.variant()
	keys := []string{l.listingKey(app, variant), l.listingLockKey(app, variant), l.globalKey(app), l.nodesKey(app)}
	token := strconv.FormatUint(rand.Uint64(), 36)
	accept := int64(math.MaxInt64) // first attempt: only a valid cached result
	waited := false
	for attempt := 0; ; attempt++ {
		v, err := flightScript.Run(ctx, l.rdb, keys, token, l.opts.LockTTL.Milliseconds(), accept).Slice()
		if err != nil {
			return SharedResult{}, fmt.Errorf("shared listing: %w", err)
		}
		if len(v) < 2 {
			return SharedResult{}, errors.New("shared listing: short script result")
		}
		status, _ := toInt(v[0])
		now, _ := toInt(v[1])
		switch status {
		case flightCached:
			if len(v) < 3 {
				return SharedResult{}, errors.New("shared listing: cached result missing")
			}
			val, _ := v[2].(string)
			res, err := decodeShared(val, now)
			if err != nil {
				return SharedResult{}, err
			}
			res.Source = Cached
			if waited {
				res.Source = Waited
			}
			return res, nil
		case flightCompute:
			stopRenew := l.renewLock(ctx, keys[1], token)
			ls, body, err := compute()
			stopRenew()
			value := ""
			if err == nil {
				value = encodeShared(ls, body)
			}
			// Publish (or, after a failure, only release the lock so a waiter
			// computes at once) even if our caller went away: the waiters
			// on other replicas still want it.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			// A failed publish costs the others a recomputation once the lock
			// expires; this answer is good either way, so it is not an error.
			_ = flightDoneScript.Run(dctx, l.rdb, keys[:2], token, value, l.opts.CacheTTL.Milliseconds()).Err()
			cancel()
			if err != nil {
				return SharedResult{}, err
			}
			return SharedResult{Body: body, Fresh: ls.Fresh, Source: Computed}, nil
		}
		// Someone else computes. Take their result even if the number of
		// occupied channels moved again meanwhile: it was read after the
		// result we rejected, so waiting for it cannot starve.
		waited = true
		if len(v) >= 4 {
			rejected, _ := toInt(v[3])
			accept = min(accept, rejected)
		}
		pttl := time.Duration(0)
		if len(v) >= 3 {
			ms, _ := toInt(v[2])
			pttl = time.Duration(ms) * time.Millisecond
		}
		if err := listingBackoff(ctx, attempt, pttl); err != nil {
			return SharedResult{}, fmt.Errorf("shared listing: waiting for another computation: %w", err)
		}
	}
}

// listingBackoff waits before a waiter's next look at another caller's
// computation: bounded exponential backoff with jitter, 1, 2, 4 ... 20 ms,
// never past the lock's expiry pttl when known (then the waiter tries to
// take it itself).
func listingBackoff(ctx context.Context, attempt int, pttl time.Duration) error {
	d := min(time.Millisecond<<min(attempt, 5), defaultMaxListingBackoff)
	d = d/2 + rand.N(d/2+1)
	if pttl > 0 && pttl < d {
		d = pttl + time.Millisecond
	}
	if !clock.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// renewLock extends the listing lock at a third of its TTL until the
// returned func is called, so a computation longer than LockTTL (a huge app,
// a slow Redis) is not duplicated by a waiter that thinks the holder died.
// A holder that really dies, or whose caller gave up (its computation fails
// then), stops renewing, and its lock expires as before.
func (l *Listings) renewLock(ctx context.Context, lock, token string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(l.opts.LockTTL/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.LockTTL)
			held, err := flightRenewScript.Run(rctx, l.rdb, []string{lock}, token, l.opts.LockTTL.Milliseconds()).Int()
			cancel()
			if err == nil && held == 0 {
				return // lost it: another caller computes too; nothing to keep
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// The cached value: "<read-at ms> <occupied> <nodes> <oldest ms> <stale>\n"
// then the body. flight.lua reads the first three fields.
func encodeShared(ls Listing, body []byte) string {
	f := ls.Fresh
	var sb strings.Builder
	sb.Grow(len(body) + 64)
	fmt.Fprintf(&sb, "%d %d %d %d %d\n", f.ReadAt.UnixMilli(), ls.occupied, f.Nodes, f.OldestHeartbeat.Milliseconds(), f.Stale)
	sb.Write(body)
	return sb.String()
}

func decodeShared(v string, nowMs int64) (SharedResult, error) {
	head, body, ok := strings.Cut(v, "\n")
	var at, occupied, oldest int64
	var nodes, stale int
	if !ok {
		return SharedResult{}, errors.New("shared listing: cached value has no header")
	}
	if _, err := fmt.Sscanf(head, "%d %d %d %d %d", &at, &occupied, &nodes, &oldest, &stale); err != nil {
		return SharedResult{}, fmt.Errorf("shared listing: cached header %q: %w", head, err)
	}
	return SharedResult{
		Body: []byte(body),
		Fresh: Freshness{
			ReadAt:          time.UnixMilli(at),
			Nodes:           nodes,
			OldestHeartbeat: time.Duration(oldest) * time.Millisecond,
			Stale:           stale,
		},
		Age: time.Duration(max(nowMs-at, 0)) * time.Millisecond,
	}, nil
}
