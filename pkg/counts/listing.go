package counts

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
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

// This file is the read side the HTTP API serves beyond single counts: the
// leaderboard (Top, Channel's rank), paging walks over a frozen snapshot
// (Page), full listings computed once across every httpapi replica
// (SharedListing), and how fresh each answer is (Freshness). Every read is
// one MULTI (or one script) on the app's slot, so it runs unchanged on
// Redis Cluster and its parts agree with each other.

var (
	//go:embed scripts/freshlib.lua
	freshLibSrc string
	//go:embed scripts/fresh.lua
	freshBody string
	//go:embed scripts/channel.lua
	channelSrc string
	//go:embed scripts/flight.lua
	flightSrc string
	//go:embed scripts/flight_done.lua
	flightDoneSrc string
	//go:embed scripts/flight_renew.lua
	flightRenewSrc string
	//go:embed scripts/page.lua
	pageBody string

	freshSrc          = freshLibSrc + freshBody
	pageSrc           = statusLua + pageBody
	channelScript     = redis.NewScript(freshLibSrc + channelSrc)
	flightScript      = redis.NewScript(flightLua + flightSrc)
	flightDoneScript  = redis.NewScript(flightDoneSrc)
	flightRenewScript = redis.NewScript(flightRenewSrc)
)

// flight.lua's answers, which it reads under the names flightLua declares.
const (
	flightWait    = 0 // another caller computes the listing: wait
	flightCached  = 1 // a cached listing: use it
	flightCompute = 2 // the lock is taken: compute the listing
)

var flightLua = fmt.Sprintf("local FLIGHT_WAIT, FLIGHT_CACHED, FLIGHT_COMPUTE = %d, %d, %d\n", flightWait, flightCached, flightCompute)

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
	return &Listings{keys: keys{opts.Keyspace}, rdb: rdb, opts: opts.withDefaults()}
}

// Options returns the options in effect (defaults filled in).
func (l *Listings) Options() ListingOptions { return l.opts }

// Freshness says how far an answer may be from the truth. Counts in Redis
// lag a node by at most its flush window, except for a node that died:
// its contribution stays until the cleaner reaps it (dead-after plus a scan
// interval). All times come from the clock of the Redis shard holding the
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
	// dead, their sockets still counted until the cleaner reaps them.
	Stale int
}

// queueFreshness queues fresh.lua on p; parse with freshnessOf.
func (l *Listings) queueFreshness(ctx context.Context, p redis.Pipeliner, app string) *redis.Cmd {
	// EVAL, not EVALSHA: inside MULTI a NOSCRIPT would only surface at EXEC.
	// The script is a few hundred bytes and Redis caches it by its hash.
	return p.Eval(ctx, freshSrc, []string{l.nodesKey(app)}, l.opts.StaleAfter.Milliseconds())
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

// ChannelStats are one channel's counts.
type ChannelStats struct {
	// Subscriptions is the global subscription count (0: vacant).
	Subscriptions int64
	// Users is the distinct presence users, when asked for.
	Users int64
	// Rank is the channel's place on the leaderboard (1: most
	// subscriptions; ties ordered as Top orders them), when asked for and
	// the channel is occupied; else 0.
	Rank int64
}

// Channel reads one channel's subscription count and, if asked, its
// distinct users and leaderboard rank, all in one atomic read (one script
// call): the rank is the rank of exactly that count. O(log n) in the app's
// occupied channels.
func (l *Listings) Channel(ctx context.Context, app, channel string, users, rank bool) (ChannelStats, Freshness, error) {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	v, err := channelScript.Run(ctx, l.rdb, []string{l.globalKey(app), l.nodesKey(app), l.membersKey(app, channel)},
		channel, l.opts.StaleAfter.Milliseconds(), flag(rank), flag(users)).Slice()
	if err != nil {
		return ChannelStats{}, Freshness{}, fmt.Errorf("read channel %s: %w", channel, err)
	}
	if len(v) != 4 {
		return ChannelStats{}, Freshness{}, fmt.Errorf("read channel %s: %d values, want 4", channel, len(v))
	}
	fv, _ := v[0].([]any)
	ints := make([]int64, 0, len(fv))
	for _, x := range fv {
		n, err := toInt(x)
		if err != nil {
			return ChannelStats{}, Freshness{}, fmt.Errorf("read channel %s: freshness: %w", channel, err)
		}
		ints = append(ints, n)
	}
	f, err := freshnessFrom(ints)
	if err != nil {
		return ChannelStats{}, Freshness{}, err
	}
	var st ChannelStats
	score, ok := v[1].(string)
	if !ok { // nil: vacant (no rank, no users)
		return st, f, nil
	}
	n, err := strconv.ParseFloat(score, 64)
	if err != nil {
		return st, f, fmt.Errorf("read channel %s: count %q: %w", channel, score, err)
	}
	if n <= 0 {
		return st, f, nil
	}
	st.Subscriptions = int64(n)
	if r, _ := toInt(v[2]); r >= 0 {
		st.Rank = r + 1
	}
	if u, _ := toInt(v[3]); u >= 0 {
		st.Users = u
	}
	return st, f, nil
}

// ChannelCount is a channel and its global subscription count.
type ChannelCount struct {
	Name  string
	Count int64
}

// Top returns the limit channels of app with the most subscriptions, most
// first; channels with equal counts come in reverse lexicographic order
// (Redis's ZREVRANGE order, so the i-th entry has Rank i+1). O(log n +
// limit).
func (l *Listings) Top(ctx context.Context, app string, limit int) ([]ChannelCount, Freshness, error) {
	if limit <= 0 {
		return nil, Freshness{}, fmt.Errorf("leaderboard: limit %d is not positive", limit)
	}
	var zs *redis.ZSliceCmd
	f, err := l.execTx(ctx, app, "read leaderboard", func(p redis.Pipeliner) {
		zs = p.ZRevRangeWithScores(ctx, l.globalKey(app), 0, int64(limit-1))
	})
	if err != nil {
		return nil, Freshness{}, err
	}
	out := make([]ChannelCount, 0, len(zs.Val()))
	for _, z := range zs.Val() {
		name, _ := z.Member.(string)
		if z.Score > 0 {
			out = append(out, ChannelCount{Name: name, Count: int64(z.Score)})
		}
	}
	return out, f, nil
}

// Page is one page of a paging walk.
type Page struct {
	// Channels are in lexicographic order, with their counts when the page
	// was read.
	Channels []ChannelCount
	// Next is the cursor of the next page; "" when the walk is done.
	Next string
}

// Paging errors callers answer differently from a Redis failure.
var (
	// ErrBadCursor is a cursor this package did not make.
	ErrBadCursor = errors.New("malformed cursor")
	// ErrCursorExpired is a cursor whose snapshot expired: start a new walk.
	ErrCursorExpired = errors.New("cursor expired")
)

// cursor is base64url("<snapshot id>:<last name scanned>"). It carries no
// app: a cursor of another app names a snapshot that does not exist there.
const snapshotIDLen = 16

func encodeCursor(id, last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id + ":" + last))
}

func decodeCursor(c string) (id, last string, err error) {
	if len(c) > 512 {
		return "", "", ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", "", ErrBadCursor
	}
	id, last, ok := strings.Cut(string(b), ":")
	if !ok || len(id) != snapshotIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return "", "", ErrBadCursor
	}
	return id, last, nil
}

// ValidCursor reports whether c is well-formed (it may still have expired).
func ValidCursor(c string) bool {
	_, _, err := decodeCursor(c)
	return err == nil
}

// Page returns up to limit channels of app whose names start with prefix
// and sort after cursor ("" starts a walk), in lexicographic order.
//
// A walk reads a snapshot of the occupied channel names taken when it
// started (shared with other walks started within SnapshotReuse before),
// so concurrent count changes cannot reorder it: every channel occupied at
// the snapshot and still occupied when its page is read is listed exactly
// once; a channel vacated meanwhile is skipped, one occupied after the
// snapshot is not listed. A page may hold fewer than limit channels (some
// were vacated) while more remain: only an empty Next ends the walk.
// Each page is O(log n + limit); starting a walk copies the names once,
// ScanCount at a time, unless a young snapshot is reused.
func (l *Listings) Page(ctx context.Context, app, prefix, cursor string, limit int) (Page, Freshness, error) {
	if limit <= 0 {
		return Page{}, Freshness{}, fmt.Errorf("page: limit %d is not positive", limit)
	}
	var id, last string
	if cursor == "" {
		var err error
		if id, err = l.snapshot(ctx, app); err != nil {
			return Page{}, Freshness{}, err
		}
		if id == "" { // nothing occupied: an empty, finished walk
			f, err := l.Freshness(ctx, app)
			return Page{}, f, err
		}
	} else {
		var err error
		if id, last, err = decodeCursor(cursor); err != nil {
			return Page{}, Freshness{}, err
		}
	}
	lo, hi := lexRange(prefix, last)
	var res *redis.Cmd
	f, err := l.execTx(ctx, app, "read page", func(p redis.Pipeliner) {
		res = p.Eval(ctx, pageSrc, []string{l.snapshotKey(app, id), l.globalKey(app)}, lo, hi, limit, l.opts.SnapshotIdleTTL.Milliseconds())
	})
	if err != nil {
		return Page{}, Freshness{}, err
	}
	v, err := res.Slice()
	if err != nil {
		return Page{}, Freshness{}, fmt.Errorf("read page: %w", err)
	}
	if len(v) == 0 {
		return Page{}, f, errors.New("read page: empty script result")
	}
	more, _ := toInt(v[0])
	if more == statusExpired || len(v) < 3 {
		return Page{}, f, ErrCursorExpired
	}
	next := ""
	if more == 1 {
		lastName, _ := v[1].(string)
		next = encodeCursor(id, lastName)
	}
	return pageOf(v[2], next), f, nil
}

func pageOf(pairs any, next string) Page {
	flat, _ := pairs.([]any)
	pg := Page{Next: next, Channels: make([]ChannelCount, 0, len(flat)/2)}
	for i := 0; i+1 < len(flat); i += 2 {
		name, _ := flat[i].(string)
		s, _ := flat[i+1].(string)
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 || math.IsNaN(n) {
			continue
		}
		pg.Channels = append(pg.Channels, ChannelCount{Name: name, Count: int64(n)})
	}
	return pg
}

// lexRange returns the ZRANGE BYLEX bounds of the names starting with
// prefix that sort after last ("" for none).
func lexRange(prefix, last string) (lo, hi string) {
	lo = "-"
	if prefix != "" {
		lo = "[" + prefix
	}
	if last != "" && last >= prefix {
		lo = "(" + last
	}
	hi = "+"
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		// The first string after every name with the prefix: the prefix
		// with its last byte below 0xff incremented.
		if b[i] < 0xff {
			b[i]++
			hi = "(" + string(b[:i+1])
			break
		}
	}
	return lo, hi
}

// snapshot returns the id of a young snapshot of app's channel names, taking
// one if none is young enough; "" when nothing is occupied.
//
// A snapshot is copied ScanCount names at a time (ZSCAN, then ZADD with
// score 0 into a building key), so no command's run time grows with the
// app, and renamed into place when complete: a walk never reads a partial
// one. ZSCAN returns every name occupied throughout the copy, so a walk
// still lists each channel occupied from its start to its page exactly
// once; a name occupied or vacated during the copy may or may not be in it.
//
// One caller at a time copies (a lock, renewed while it copies, as a
// shared listing's); the others wait for its snapshot. New walks share a
// snapshot for SnapshotReuse or ten times as long as it took to copy,
// whichever is longer, so walks started in a loop spend at most about a
// tenth of the app's primary on copies.
func (l *Listings) snapshot(ctx context.Context, app string) (string, error) {
	lock := l.snapshotLockKey(app)
	for attempt := 0; ; attempt++ {
		if id, err := l.youngSnapshot(ctx, app); id != "" || err != nil {
			return id, err
		}
		b := make([]byte, snapshotIDLen/2)
		_, _ = crand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
		id := hex.EncodeToString(b)
		took, err := l.rdb.SetNX(ctx, lock, id, l.opts.LockTTL).Result()
		if err != nil {
			return "", fmt.Errorf("snapshot channels: %w", err)
		}
		if took {
			// A copy may have finished between the look above and the lock.
			young, err := l.youngSnapshot(ctx, app)
			if young != "" || err != nil {
				_ = flightDoneScript.Run(ctx, l.rdb, []string{l.snapshotCurrentKey(app), lock}, id, "", 0).Err()
				return young, err
			}
			return l.copySnapshot(ctx, app, id)
		}
		if err := listingBackoff(ctx, attempt, 0); err != nil {
			return "", fmt.Errorf("snapshot channels: waiting for another copy: %w", err)
		}
	}
}

// copySnapshot copies app's occupied names into snapshot id, holding the
// snapshot lock (token id), and makes it the one new walks share.
func (l *Listings) copySnapshot(ctx context.Context, app, id string) (string, error) {
	lock := l.snapshotLockKey(app)
	stopRenew := l.renewLock(ctx, lock, id)
	began := time.Now()
	building, snap := l.snapshotBuildKey(app, id), l.snapshotKey(app, id)
	copied := 0
	err := l.scanChannels(ctx, app, "", func(page []redis.Z) error {
		for i := range page {
			page[i].Score = 0 // every score 0: ZRANGE BYLEX orders by name
		}
		_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZAdd(ctx, building, page...)
			p.PExpire(ctx, building, l.opts.SnapshotIdleTTL)
			return nil
		})
		copied += len(page)
		return err
	})
	stopRenew()
	if err == nil && copied > 0 {
		_, err = l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Rename(ctx, building, snap)
			p.PExpire(ctx, snap, l.opts.SnapshotIdleTTL)
			return nil
		})
	}
	// Share it (or, after a failure or with nothing occupied, only release
	// the lock) even if our caller went away: the waiters still want it.
	share := ""
	if err == nil && copied > 0 {
		share = id
	}
	reuse := max(l.opts.SnapshotReuse, 10*time.Since(began))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if derr := flightDoneScript.Run(dctx, l.rdb, []string{l.snapshotCurrentKey(app), lock}, id, share, reuse.Milliseconds()).Err(); err == nil {
		err = derr
	}
	if err != nil {
		return "", fmt.Errorf("snapshot channels: %w", err)
	}
	return share, nil
}

// youngSnapshot returns the snapshot new walks of app share while it is
// young (SnapshotReuse), extending its idle TTL; "" if there is none.
func (l *Listings) youngSnapshot(ctx context.Context, app string) (string, error) {
	id, err := l.rdb.Get(ctx, l.snapshotCurrentKey(app)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("snapshot channels: %w", err)
	}
	if _, _, err := decodeCursor(encodeCursor(id, "")); err != nil {
		return "", nil // not one of ours: take a new one
	}
	alive, err := l.rdb.PExpire(ctx, l.snapshotKey(app, id), l.opts.SnapshotIdleTTL).Result()
	if err != nil {
		return "", fmt.Errorf("snapshot channels: %w", err)
	}
	if !alive {
		return "", nil
	}
	return id, nil
}

// scanChannels hands each occupied channel of app whose name matches the
// glob match ("" for all) to each, ScanCount at a time, with its count
// when that slice was read (ZSCAN: each command bounded, whatever the
// app's size). A channel occupied throughout is handed over at least once
// (ZSCAN may repeat one); one occupied or vacated meanwhile may be missed.
func (l *Listings) scanChannels(ctx context.Context, app, match string, each func([]redis.Z) error) error {
	var cursor uint64
	for {
		kv, next, err := l.rdb.ZScan(ctx, l.globalKey(app), cursor, match, int64(l.opts.ScanCount)).Result()
		if err != nil {
			return fmt.Errorf("scan channels: %w", err)
		}
		page := make([]redis.Z, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			n, err := strconv.ParseFloat(kv[i+1], 64)
			if err != nil || n <= 0 || math.IsNaN(n) {
				continue
			}
			page = append(page, redis.Z{Member: kv[i], Score: n})
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
		s := Store{rdb: l.rdb}
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
//     has as many occupied channels as when it was read (so a channel
//     vacated or occupied invalidates it at once, unless another changed
//     the other way within the TTL).
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
	keys := []string{l.listingKey(app, variant), l.listingLockKey(app, variant), l.globalKey(app)}
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
// then the body. flight.lua reads the first two fields.
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
