package counts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
)

// Kind names what a Difference is about.
type Kind string

// Kinds of entries the audit compares.
const (
	// KindChannel is a channel's global subscription count.
	KindChannel Kind = "channel"
	// KindMember is a presence member's cluster-wide socket count.
	KindMember Kind = "member"
	// KindConns is the app's open sockets cluster-wide.
	KindConns Kind = "conns"
	// KindContribution is a field of one node's own contribution that is
	// zero, negative or not an integer. Repair leaves it alone: the node
	// owns it and rewrites it whole when it republishes.
	KindContribution Kind = "contribution"
)

// Difference is one global entry that is not the sum of the registered
// nodes' contributions to it (or, for KindContribution, one bad field of a
// node's contribution).
type Difference struct {
	Kind Kind
	// Channel is the channel (KindChannel, KindMember, and the field's
	// channel for KindContribution).
	Channel string
	// User is the presence member (KindMember, and for KindContribution the
	// user of a member field).
	User string
	// Node is the node whose field is bad (KindContribution only).
	Node string
	// Field is the node's bad contribution field (KindContribution only).
	Field string
	// Want is the sum of the registered nodes' contributions: what the
	// global entry must hold (0: it must not exist).
	Want int64
	// Have is the value stored (0 when absent; a non-integer is truncated).
	Have int64
	// Present reports whether the entry exists: a stored zero or negative
	// entry is drift too, since it shows up in listings and user counts.
	Present bool
}

// Repairable reports whether Repair can fix the difference.
func (d Difference) Repairable() bool { return d.Kind != KindContribution }

// field is the contribution field the difference is about.
func (d Difference) field() string {
	switch d.Kind {
	case KindChannel:
		return channelField(d.Channel)
	case KindMember:
		return memberField(d.Channel, d.User)
	case KindConns:
		return connectionsField
	}
	return d.Field
}

// Drift is what one audit of one app found.
type Drift struct {
	App string
	// Nodes is how many nodes were registered when the audit read.
	Nodes int
	// Diffs lists every differing entry, sorted by kind, channel and user.
	Diffs []Difference
}

// Found reports whether the audit found any difference.
func (d Drift) Found() bool { return len(d.Diffs) > 0 }

// Audit recomputes app's global channel counts, presence members and
// connections from the registered nodes' contributions and returns every
// entry that differs, including global entries no contribution backs and
// stored zero or negative entries. The comparison is one atomic script, so
// concurrent writers cannot make it report drift that is not there. Member
// hashes of channels nothing else names are found by a SCAN first (not
// atomic, but only a list of names to check: the script compares them).
// The script blocks the app's shard for time linear in the app's counts
// (see doc.go).
func (s *Store) Audit(ctx context.Context, app string) (Drift, error) {
	d, err := s.audit(ctx, app)
	if err != nil {
		return Drift{}, fmt.Errorf("audit app %s: %w", app, err)
	}
	return d, nil
}

// audit runs audit.lua declaring every key it reads: the contribution of
// each node registered now, and the member hash of each channel that has
// one (by SCAN) or that a contribution names. Those names are read before
// the script, so a node registered or a member added meanwhile makes it
// compare nothing and name what it lacked; it tries again with them.
func (s *Store) audit(ctx context.Context, app string) (Drift, error) {
	channels, err := s.memberChannels(ctx, app)
	if err != nil {
		return Drift{}, err
	}
	// Each retry declares more (a node registered, a member channel
	// named), and an app's channels are finite, so this converges; on a
	// loaded machine a churning app can need more than a handful.
	for try := 0; try < 20; try++ {
		nodes, reaps, err := s.sources(ctx, app)
		if err != nil {
			return Drift{}, err
		}
		keys := append(s.auditKeys(app), s.connsKey(app))
		keys = append(keys, s.contributionKeys(app, nodes, reaps)...)
		args := make([]any, 0, 1+len(channels))
		args = append(args, s.appPrefix(app))
		for _, ch := range channels {
			keys = append(keys, s.membersKey(app, ch))
			args = append(args, ch)
		}
		v, err := auditScript.Run(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return Drift{}, err
		}
		if len(v) == 3 && v[0] == int64(statusUndeclared) {
			more, _ := v[2].([]any)
			for _, ch := range more {
				if ch, ok := ch.(string); ok {
					channels = append(channels, ch)
				}
			}
			slices.Sort(channels)
			channels = slices.Compact(channels)
			continue
		}
		return parseAudit(app, v)
	}
	return Drift{}, errors.New("the registered nodes and members kept changing")
}

func parseAudit(app string, v []any) (Drift, error) {
	if len(v) != 2 {
		return Drift{}, fmt.Errorf("audit script returned %d values, want 2", len(v))
	}
	nodes, err := toInt(v[0])
	if err != nil {
		return Drift{}, err
	}
	d := Drift{App: app, Nodes: int(nodes)}
	flat, _ := v[1].([]any)
	for i := 0; i+5 < len(flat); i += 6 {
		kind, _ := flat[i].(string)
		a, _ := flat[i+1].(string)
		b, _ := flat[i+2].(string)
		want, err := toInt(flat[i+3])
		if err != nil {
			return Drift{}, err
		}
		raw, _ := flat[i+4].(string)
		present, err := toInt(flat[i+5])
		if err != nil {
			return Drift{}, err
		}
		diff := Difference{Want: want, Present: present == 1}
		if diff.Present {
			// A stored value that is no integer is drift whatever it is;
			// report its integer part, or 0 when it is no number at all.
			f, _ := strconv.ParseFloat(raw, 64)
			diff.Have = int64(f)
		}
		switch kind {
		case "c":
			diff.Kind, diff.Channel = KindChannel, a
		case "m":
			diff.Kind, diff.Channel, diff.User = KindMember, a, b
		case "n":
			diff.Kind = KindConns
		case "x":
			diff.Kind, diff.Node, diff.Field = KindContribution, a, b
			_, diff.Channel, diff.User = parseField(b)
		default:
			return Drift{}, fmt.Errorf("audit script returned kind %q", kind)
		}
		d.Diffs = append(d.Diffs, diff)
	}
	slices.SortFunc(d.Diffs, func(x, y Difference) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Channel, y.Channel),
			cmp.Compare(x.User, y.User), cmp.Compare(x.Node, y.Node), cmp.Compare(x.Field, y.Field))
	})
	return d, nil
}

// memberChannels lists the channels of app that have a presence member
// hash, by SCAN on the shard holding the app's slot. O(keys of that shard)
// spread over many short commands, so it never blocks Redis.
func (s *Store) memberChannels(ctx context.Context, app string) ([]string, error) {
	var out []string
	err := keyspace.ScanPrefix(ctx, s.rdb, s.membersKeyPrefix(app), func(key string) {
		if ch, ok := s.membersKeyChannel(app, key); ok {
			out = append(out, ch)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan member hashes: %w", err)
	}
	// SCAN may return a key more than once.
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Repair sets every repairable entry of drift (found by Audit for app) to
// the sum of the contributions of the nodes registered at the time of the
// repair, one atomic script per entry: that script reads the sum and writes
// the global in one unit, so changes applied concurrently, before or after
// it, are all kept, and an entry that reaches 0 is deleted. It never writes
// a node's contribution. It returns how many entries it changed (an entry
// that was fixed meanwhile is not counted), and stops at the first error.
//
// Repair announces nothing: a presence member it adds or removes gets no
// member_added/member_removed, and a member it restores has no user_info
// until one of its nodes republishes.
func (s *Store) Repair(ctx context.Context, app string, drift Drift) (int, error) {
	changed := 0
	for _, d := range drift.Diffs {
		if !d.Repairable() {
			continue
		}
		v, err := s.repairOne(ctx, app, d.field())
		if err != nil {
			return changed, fmt.Errorf("repair %s %q of app %s: %w", d.Kind, d.field(), app, err)
		}
		if len(v) != 2 {
			return changed, fmt.Errorf("repair %s %q of app %s: script returned %d values", d.Kind, d.field(), app, len(v))
		}
		if v[0] == 1 {
			changed++
		}
	}
	return changed, nil
}

// repairOne runs repair.lua for one field, declaring the nodes registered
// now and the keys the field writes; if a node registered meanwhile, the
// script writes nothing and it tries again.
func (s *Store) repairOne(ctx context.Context, app, field string) ([]int64, error) {
	// Each retry declares more (a node registered, a member channel
	// named), and an app's channels are finite, so this converges; on a
	// loaded machine a churning app can need more than a handful.
	for try := 0; try < 20; try++ {
		nodes, reaps, err := s.sources(ctx, app)
		if err != nil {
			return nil, err
		}
		keys := append(s.auditKeys(app), s.contributionKeys(app, nodes, reaps)...)
		keys = append(keys, s.fieldKeys(app, field)...)
		v, err := repairScript.Run(ctx, s.rdb, keys, s.appPrefix(app), field).Int64Slice()
		if err != nil || len(v) == 0 || v[0] != statusUndeclared {
			return v, err
		}
	}
	return nil, errors.New("the registered nodes kept changing")
}

// sources lists the registered nodes of app and its reaps under way, in one
// round trip: the contributions the global counts include (a script then
// checks the list is still current).
func (s *Store) sources(ctx context.Context, app string) (nodes, reaps []string, err error) {
	var nc *redis.StringSliceCmd
	var rc *redis.StringSliceCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		nc = p.ZRange(ctx, s.nodesKey(app), 0, -1)
		rc = p.SMembers(ctx, s.reapsKey(app))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list contributions: %w", err)
	}
	return nc.Val(), rc.Val(), nil
}

// NodeCount is how many nodes an app has registered, by Redis's clock.
type NodeCount struct {
	// Registered nodes have a contribution the global counts include.
	Registered int
	// Stale ones were last seen at least deadAfter ago: dead until they
	// write again, and reaped by the next scan.
	Stale int
	// Reaping is how many reaps of the app are under way (or were left
	// half done): FinishReaps drains them.
	Reaping int
}

// Alive is how many registered nodes are not stale.
func (n NodeCount) Alive() int { return n.Registered - n.Stale }

// Nodes counts app's registered and stale nodes, and its reaps under way,
// in one round trip. O(log nodes).
func (s *Store) Nodes(ctx context.Context, app string, deadAfter time.Duration) (NodeCount, error) {
	var fresh *redis.Cmd
	var reaping *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		// EVAL, not EVALSHA: a pipeline cannot fall back on NOSCRIPT, and
		// the script is short.
		fresh = p.Eval(ctx, freshSrc, []string{s.nodesKey(app)}, deadAfter.Milliseconds())
		reaping = p.SCard(ctx, s.reapsKey(app))
		return nil
	})
	var v []int64
	if err == nil {
		v, err = fresh.Int64Slice()
	}
	if err == nil && len(v) != 4 {
		err = errors.New("unexpected freshness result")
	}
	if err != nil {
		return NodeCount{}, fmt.Errorf("count nodes of app %s: %w", app, err)
	}
	return NodeCount{Registered: int(v[1]), Stale: int(v[3]), Reaping: int(reaping.Val())}, nil
}
