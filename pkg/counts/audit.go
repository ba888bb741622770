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
// connections from the contributions and returns every entry that differs,
// including global entries no contribution backs, entries only
// contributions name, and stored zero or negative entries.
//
// It walks the app in slices (see Store.SliceSize), each one atomic script
// that compares a few entries' globals with the sum of every contribution
// to them (the registered nodes' and the reaps' under way) in one unit: a
// concurrent writer cannot make it report drift that is not there, however
// many flushes land between slices, and no script's length grows with the
// app. The names come from SCANs (ZSCAN of the global counts, HSCAN of
// each member hash and contribution, SCAN for the member hashes), which
// are not atomic but only lists of names to compare: an entry that
// exists throughout the audit is compared. Drift that appears during it
// may be found or not; the next audit finds it.
func (s *Store) Audit(ctx context.Context, app string) (Drift, error) {
	d, err := s.audit(ctx, app)
	if err != nil {
		return Drift{}, fmt.Errorf("audit app %s: %w", app, err)
	}
	return d, nil
}

// auditor is one audit of one app under way.
type auditor struct {
	s            *Store
	app          string
	nodes, reaps []string // the contributions, as last listed
	d            Drift
	seen         map[Difference]bool
}

// audit walks the global side (channels, member hashes, conns), then each
// contribution's fields for entries with no global.
func (s *Store) audit(ctx context.Context, app string) (Drift, error) {
	a := &auditor{s: s, app: app, d: Drift{App: app}, seen: map[Difference]bool{}}
	var err error
	if a.nodes, a.reaps, err = s.sources(ctx, app); err != nil {
		return Drift{}, err
	}
	if err := a.run(ctx, "g", "", []string{connectionsField}); err != nil {
		return Drift{}, err
	}
	n := int64(s.sliceSize())
	var cursor uint64
	for {
		kv, next, err := s.rdb.ZScan(ctx, s.globalKey(app), cursor, "", n).Result()
		if err != nil {
			return Drift{}, fmt.Errorf("scan channels: %w", err)
		}
		fields := make([]string, 0, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			fields = append(fields, channelField(kv[i]))
		}
		if err := a.run(ctx, "g", "", fields); err != nil {
			return Drift{}, err
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	channels, err := s.memberChannels(ctx, app)
	if err != nil {
		return Drift{}, err
	}
	for _, ch := range channels {
		err := a.scanHash(ctx, s.membersKey(app, ch), "g", "", func(user string) string { return memberField(ch, user) })
		if err != nil {
			return Drift{}, err
		}
	}
	// The contributions listed now: one registered later has its entries
	// compared by the global side or by the next audit.
	nodes, reaps := slices.Clone(a.nodes), slices.Clone(a.reaps)
	for _, id := range nodes {
		if err := a.scanHash(ctx, s.nodeKey(app, id), "o", id, nil); err != nil {
			return Drift{}, err
		}
	}
	for _, id := range reaps {
		if err := a.scanHash(ctx, s.reapingKey(app, id), "o", "reaping:"+id, nil); err != nil {
			return Drift{}, err
		}
	}
	sortDiffs(a.d.Diffs)
	return a.d, nil
}

// scanHash runs the audit slices over the names of key's fields (through
// field, if given, to make them contribution fields).
func (a *auditor) scanHash(ctx context.Context, key, mode, label string, field func(string) string) error {
	var cursor uint64
	for {
		kv, next, err := a.s.rdb.HScan(ctx, key, cursor, "", int64(a.s.sliceSize())).Result()
		if err != nil {
			return fmt.Errorf("scan %s: %w", key, err)
		}
		fields := make([]string, 0, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			f := kv[i]
			if field != nil {
				f = field(f)
			}
			fields = append(fields, f)
		}
		if err := a.run(ctx, mode, label, fields); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// run compares fields in slices small enough that one slice reads about
// 4 x SliceSize contribution entries, whatever the number of
// contributions.
func (a *auditor) run(ctx context.Context, mode, label string, fields []string) error {
	for len(fields) > 0 {
		k := max(1, a.s.sliceSize()*4/(len(a.nodes)+len(a.reaps)+1))
		k = min(k, len(fields), maxSliceSize)
		if err := a.slice(ctx, mode, label, fields[:k]); err != nil {
			return err
		}
		fields = fields[k:]
	}
	return nil
}

// slice runs audit.lua on fields, declaring the contributions listed last
// and the member hashes the fields name; if the contributions changed
// meanwhile, the script compares nothing and it lists them again.
func (a *auditor) slice(ctx context.Context, mode, label string, fields []string) error {
	s, app := a.s, a.app
	var channels []string
	seen := map[string]bool{}
	for _, f := range fields {
		if kind, ch, _ := parseField(f); kind == 'm' && !seen[ch] {
			seen[ch] = true
			channels = append(channels, ch)
		}
	}
	args := make([]any, 0, 3+len(fields))
	args = append(args, s.appPrefix(app), mode, label)
	for _, f := range fields {
		args = append(args, f)
	}
	// Each retry declares the contributions registered since, which are
	// finite; on a loaded machine a churning app can need more than a
	// handful.
	for try := 0; try < 20; try++ {
		keys := append(s.auditKeys(app), s.connsKey(app))
		keys = append(keys, s.contributionKeys(app, a.nodes, a.reaps)...)
		for _, ch := range channels {
			keys = append(keys, s.membersKey(app, ch))
		}
		v, err := auditScript.Run(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return err
		}
		if len(v) == 3 && v[0] == int64(statusUndeclared) {
			if a.nodes, a.reaps, err = s.sources(ctx, app); err != nil {
				return err
			}
			continue
		}
		d, err := parseAudit(app, v)
		if err != nil {
			return err
		}
		a.d.Nodes = d.Nodes
		for _, diff := range d.Diffs {
			// An entry compared twice (a channel both the global and a
			// contribution name, a field SCAN returned twice) is one
			// difference.
			k := Difference{Kind: diff.Kind, Channel: diff.Channel, User: diff.User, Node: diff.Node, Field: diff.Field}
			if !a.seen[k] {
				a.seen[k] = true
				a.d.Diffs = append(a.d.Diffs, diff)
			}
		}
		return nil
	}
	return errors.New("the registered nodes kept changing")
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
	sortDiffs(d.Diffs)
	return d, nil
}

// sortDiffs sorts differences by kind, channel, user, node and field.
func sortDiffs(diffs []Difference) {
	slices.SortFunc(diffs, func(x, y Difference) int {
		return cmp.Or(cmp.Compare(x.Kind, y.Kind), cmp.Compare(x.Channel, y.Channel),
			cmp.Compare(x.User, y.User), cmp.Compare(x.Node, y.Node), cmp.Compare(x.Field, y.Field))
	})
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
		fresh = p.Eval(ctx, freshScript.Source(), []string{s.nodesKey(app)}, deadAfter.Milliseconds())
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
