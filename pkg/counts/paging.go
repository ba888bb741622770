package counts

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Page is one page of a paging walk.
type Page struct {
	// Channels are in lexicographic order, with their counts when the page
	// was read (leaving out what the reaps under way still hold then, see
	// exact.go).
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
	var f Freshness
	res, err := l.exactly(app, l.seen.of(app), func(reaps []string) (any, error) {
		var res *redis.Cmd
		var err error
		f, err = l.execTx(ctx, app, "read page", func(p redis.Pipeliner) {
			res = p.Eval(ctx, pageScript.Source(), l.withReaps([]string{l.snapshotKey(app, id), l.globalKey(app)}, app, reaps),
				lo, hi, limit, l.opts.SnapshotIdleTTL.Milliseconds())
		})
		if err != nil {
			return nil, err // execTx's says what failed
		}
		v, err := res.Result()
		if err != nil {
			return nil, fmt.Errorf("read page: %w", err)
		}
		return v, nil
	})
	if err != nil {
		return Page{}, Freshness{}, err
	}
	v, _ := res.([]any)
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
