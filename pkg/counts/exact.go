package counts

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/luascript"
)

// Reads are exact once a node is known dead: the unit that declares it
// dead (reap.lua) renames its contribution under a reaping key, and every
// read of counts subtracts, in the script that reads the globals, what the
// reaping hashes still hold of what it reads (scripts/exactlib.lua). Each
// reap slice subtracts from the globals exactly what it deletes from its
// reaping hash, so global minus reaping is the live nodes' sum after every
// unit, however long the reap takes.
//
// A retire (a live node's republish, reap.lua) moves the node's
// contribution aside as a reap too, but the node is alive: reads keep
// counting what that reap holds, so during a republish counts may read
// high, never low, as before. Its id starts with retirePrefix. A node
// known dead during its republish is unregistered by its reap, and from
// then reads leave its retire out too.
//
// A script may touch only the keys it declares, and the reaping keys are
// known only from the app's reaps set: the caller declares the reaps it
// believes under way (none, first), and a script that finds others answers
// {statusReaps, their ids} having read nothing else; the caller runs it
// again with those. No reap under way (the common case) costs one
// SMEMBERS in the same round trip.

const (
	// reapsRetrySlack is how many retries of a read (Exactly) beyond two
	// per reap named are allowed for a retire's node that registers again.
	reapsRetrySlack = 8
	// retirePrefix starts the id of a retire's reap (newReapID); a hex
	// nonce, which starts every other, never does.
	retirePrefix = "r"
	// reapWindow bounds the fields of each reap under way that a read
	// scans for the channels it holds (exactlib.lua's held_channels): a
	// wsnode's channel load and a channel's rank are exact while each reap
	// holds fewer, and never grow with a node's size.
	reapWindow = 1000
	// topWindow bounds how many channels past its limit the leaderboard
	// reads while a reap is under way (top.lua).
	topWindow = 1000
)

var errReapsMoving = errors.New("the reaps under way changed more often than their starts and ends explain")

// withReaps appends to ks (a read script's own keys) the app's reaps set,
// its nodes (whose registration tells a live node's retire from a dead
// one's) and the reaping key of each of ids, as exactlib.lua takes them.
func (k keys) withReaps(ks []string, app string, ids []string) []string {
	out := make([]string, 0, len(ks)+2+len(ids))
	out = append(append(out, ks...), k.reapsKey(app), k.nodesKey(app))
	for _, id := range ids {
		out = append(out, k.reapingKey(app, id))
	}
	return out
}

// ReapKeys are the keys a script prepended with ExactPrelude declares after its
// own, in ks: app's reaps set and the reaping hash of each of reaps (ids
// Exactly gives).
func ReapKeys(ks keyspace.Space, app string, reaps []string) []string {
	return keys{ks: ks}.withReaps(nil, app, reaps)
}

// otherReaps reports whether a read script's reply v is {statusReaps,
// ids}, and those ids.
func otherReaps(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok || len(l) != 2 {
		return nil, false
	}
	if s, ok := l[0].(int64); !ok || s != statusReaps {
		return nil, false
	}
	raw, _ := l[1].([]any)
	ids := make([]string, 0, len(raw))
	for _, x := range raw {
		if id, ok := x.(string); ok {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// Exactly calls read with the reaps it should declare, reaps first, until
// its reply is not a script's {STATUS_REAPS, ids} (see ExactPrelude), and
// returns that reply.
//
// Each such reply means the set differs from the reaps declared: a reap
// named in it, or declared, started or ended since the last try (or, a
// retire, its node's registration changed). A reap does each once, so
// there are about twice as many such replies as reaps ever named, at most:
// however many nodes die together, the retries are bounded by them, not by
// a fixed count that a storm of reaps outruns (reapsRetrySlack covers the
// registrations). More means the set is not what moves.
func Exactly(reaps []string, read func(reaps []string) (any, error)) (any, error) {
	named := map[string]bool{}
	for retries := 0; ; retries++ {
		for _, id := range reaps {
			named[id] = true
		}
		if retries > 2*len(named)+reapsRetrySlack {
			return nil, errReapsMoving
		}
		v, err := read(reaps)
		if err != nil {
			return nil, err
		}
		var other bool
		if reaps, other = otherReaps(v); !other {
			return v, nil
		}
	}
}

// runExact runs a read script with ks, its own keys, and the reaps under
// way (see Exactly), declaring first the reaps app's last read found: while
// a reap runs, which may take seconds for a large node, every read after
// the first costs one script, not two.
func (k keys) runExact(ctx context.Context, rdb redis.Scripter, script *luascript.Script, app string, ks []string, args ...any) (any, error) {
	return k.exactly(app, k.seen.of(app), func(reaps []string) (any, error) {
		return script.Run(ctx, rdb, k.withReaps(ks, app, reaps), args...).Result()
	})
}

// exactly is Exactly from the reaps first, remembering for app the reaps
// its answer declared when they differ from those remembered.
func (k keys) exactly(app string, first []string, read func(reaps []string) (any, error)) (any, error) {
	declared := first
	v, err := Exactly(first, func(reaps []string) (any, error) {
		declared = reaps
		return read(reaps)
	})
	if err == nil && !slices.Equal(declared, k.seen.of(app)) {
		k.seen.set(app, declared)
	}
	return v, err
}

// reapsSeen holds, per app, the reaps under way as a read last found them;
// an app with none has no entry, so a read with no reap under way only
// looks.
type reapsSeen struct{ m sync.Map } // app -> []string

func (r *reapsSeen) of(app string) []string {
	if r == nil {
		return nil
	}
	v, _ := r.m.Load(app)
	ids, _ := v.([]string)
	return ids
}

func (r *reapsSeen) set(app string, ids []string) {
	switch {
	case r == nil:
	case len(ids) == 0:
		r.m.Delete(app)
	default:
		r.m.Store(app, ids)
	}
}

// countsOf parses counts.lua's reply: a channel's subscriptions and its
// users (-1 when not asked).
func countsOf(v any) (subs, users int64, err error) {
	l, _ := v.([]any)
	if len(l) != 2 {
		return 0, 0, fmt.Errorf("counts: %d values, want 2", len(l))
	}
	if subs, err = toInt(l[0]); err != nil {
		return 0, 0, err
	}
	users, err = toInt(l[1])
	return subs, users, err
}

// scanOf parses scan.lua's reply: the next cursor and the occupied
// channels read, with their counts.
func scanOf(v any) (next uint64, zs []redis.Z, err error) {
	l, _ := v.([]any)
	if len(l) != 2 {
		return 0, nil, fmt.Errorf("scan: %d values, want 2", len(l))
	}
	c, _ := l[0].(string)
	if next, err = strconv.ParseUint(c, 10, 64); err != nil {
		return 0, nil, fmt.Errorf("scan: cursor %q: %w", c, err)
	}
	kv, _ := l[1].([]any)
	zs = make([]redis.Z, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		s, _ := kv[i+1].(string)
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 || math.IsNaN(n) {
			continue
		}
		zs = append(zs, redis.Z{Member: kv[i], Score: n})
	}
	return next, zs, nil
}
