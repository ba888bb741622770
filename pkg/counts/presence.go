package counts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MemberEdge is a presence member joining (first socket anywhere in the
// cluster) or leaving (last socket gone) a channel.
type MemberEdge struct {
	Channel string
	UserID  string
	// Added is true for a join, false for a leave.
	Added bool
	// UserInfo is the member's user_info (joins only; may be nil).
	UserInfo json.RawMessage
	// Version is the unit's (see Edges.Versions): a member list read with
	// MembersAt at a version at least this one holds the edge already.
	Version int64
}

// Edges reports what one atomic unit of one app changed cluster-wide: a
// flush of a node's changes, a node's removal, or the reaping of a dead
// node. Recorder calls RecorderOptions.OnFlushed with it from the flushing
// goroutine; Store.ReapNode returns it inside Reaped.
type Edges struct {
	App string
	// Channels holds the global subscription count, right after the unit,
	// of every channel whose count it changed (0: vacated).
	Channels map[string]int64
	// Versions holds the version of each count in Channels: the units of
	// an app number their counts in the order Redis ran them, whichever
	// process ran them, so of two counts of a channel the higher version is
	// the later. Edges merged from several units keep each channel's latest.
	Versions map[string]int64
	// Members lists the presence joins and leaves the unit caused (a reap
	// causes leaves only).
	Members []MemberEdge
}

// merge adds the edges of a later unit (or units) of the same app: each
// channel keeps its latest count, by version, and o's member edges follow
// e's.
func (e *Edges) merge(o Edges) {
	for ch, n := range o.Channels {
		if v, ok := e.Versions[ch]; ok && v > o.Versions[ch] {
			continue
		}
		if e.Channels == nil {
			e.Channels = make(map[string]int64, len(o.Channels))
			e.Versions = make(map[string]int64, len(o.Channels))
		}
		e.Channels[ch] = n
		e.Versions[ch] = o.Versions[ch]
	}
	e.Members = append(e.Members, o.Members...)
}

// Empty reports whether the unit changed nothing cluster-wide.
func (e Edges) Empty() bool { return len(e.Channels) == 0 && len(e.Members) == 0 }

// Vacated returns the channels the unit emptied.
func (e Edges) Vacated() []string {
	var out []string
	for ch, n := range e.Channels {
		if n == 0 {
			out = append(out, ch)
		}
	}
	return out
}

// Reaped reports what reaping (or removing) one node removed.
type Reaped struct {
	// Edges are the new global counts of every channel the node was
	// subscribed to, and the presence members whose last socket was on
	// the node.
	Edges
	// Fields is how many entries of the node's contribution were subtracted.
	Fields int
	// SinceSeen is how long before the reap, by the clock of the app's
	// Redis shard, the node was last seen: the reap latency.
	SinceSeen time.Duration
}

// scriptResult is what apply.lua and reap_slice.lua return.
type scriptResult struct {
	status   int64
	channels map[string]int64
	version  int64 // of every count in channels
	members  []MemberEdge
	left     int64 // reap_slice.lua only: fields left to reap
	// undeclared lists fields whose keys the call did not declare (status
	// statusUndeclared): nothing was written; retry declaring them.
	undeclared []string
}

// edges returns what the unit changed as Edges of app.
func (r scriptResult) edges(app string) Edges {
	e := Edges{App: app, Channels: r.channels, Members: r.members}
	if len(r.channels) > 0 {
		e.Versions = make(map[string]int64, len(r.channels))
		for ch := range r.channels {
			e.Versions[ch] = r.version
		}
	}
	return e
}

func parseResult(cmd *redis.Cmd) (scriptResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return scriptResult{}, err
	}
	var res scriptResult
	if len(v) == 0 {
		return res, errors.New("empty script result")
	}
	if res.status, err = toInt(v[0]); err != nil {
		return res, err
	}
	if res.status == statusUndeclared && len(v) > 1 {
		fields, _ := v[1].([]any)
		for _, f := range fields {
			if s, ok := f.(string); ok {
				res.undeclared = append(res.undeclared, s)
			}
		}
		return res, nil
	}
	if res.status < 0 || len(v) < 3 {
		return res, nil
	}
	chans, _ := v[1].([]any)
	if len(chans) > 0 {
		if res.version, err = toInt(chans[0]); err != nil {
			return res, err
		}
		chans = chans[1:]
	}
	for i := 0; i+1 < len(chans); i += 2 {
		ch, _ := chans[i].(string)
		n, err := toInt(chans[i+1])
		if err != nil {
			return res, err
		}
		if res.channels == nil {
			res.channels = map[string]int64{}
		}
		res.channels[ch] = n
	}
	edges, _ := v[2].([]any)
	for i := 0; i+3 < len(edges); i += 4 {
		added, err := toInt(edges[i])
		if err != nil {
			return res, err
		}
		e := MemberEdge{Added: added == 1, Version: res.version}
		e.Channel, _ = edges[i+1].(string)
		e.UserID, _ = edges[i+2].(string)
		if info, _ := edges[i+3].(string); info != "" {
			e.UserInfo = json.RawMessage(info)
		}
		res.members = append(res.members, e)
	}
	if len(v) > 3 {
		if res.left, err = toInt(v[3]); err != nil {
			return res, err
		}
	}
	return res, nil
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T in script result", v)
}

// Members returns the cluster-wide members of a presence channel: user id
// to user_info (null when none was given), in one script, leaving out
// users whose sockets are all on reaps under way (see exact.go).
func (s *Store) Members(ctx context.Context, app, channel string) (map[string]json.RawMessage, error) {
	res, err := s.runExact(ctx, s.rdb, membersScript, app, []string{s.membersKey(app, channel), s.infoKey(app, channel)}, channel)
	kv, ok := res.([]any)
	if err == nil && !ok {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return nil, fmt.Errorf("read members of %s: %w", channel, err)
	}
	out := make(map[string]json.RawMessage, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		user, _ := kv[i].(string)
		info, _ := kv[i+1].(string)
		if info == "" {
			info = "null"
		}
		out[user] = json.RawMessage(info)
	}
	return out, nil
}

// MembersAt is Members with the version of the app's counts it read (0
// when none was made since Redis began), in one MULTI/EXEC: the list holds
// every member edge of that version or lower (MemberEdge.Version), and
// none higher, so a subscriber given the list needs only the edges above.
// Unlike Members it reads the global members, which hold a dead node's
// until its reap's slices take them: the edges are of the globals, and a
// user left out because their sockets are on a reap under way would get
// no edge on rejoining elsewhere (their global count never reaches 0).
func (s *Store) MembersAt(ctx context.Context, app, channel string) (map[string]json.RawMessage, int64, error) {
	var ids *redis.MapStringStringCmd
	var infos *redis.MapStringStringCmd
	var seq *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		seq = p.Get(ctx, s.versionKey(app))
		ids = p.HGetAll(ctx, s.membersKey(app, channel))
		infos = p.HGetAll(ctx, s.infoKey(app, channel))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("read members of %s: %w", channel, err)
	}
	version, err := seq.Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, fmt.Errorf("read the version of %s's members: %w", channel, err)
	}
	out := make(map[string]json.RawMessage, len(ids.Val()))
	for user := range ids.Val() {
		info := infos.Val()[user]
		if info == "" {
			info = "null"
		}
		out[user] = json.RawMessage(info)
	}
	return out, version, nil
}

// UserCount returns the number of distinct users in a presence channel
// cluster-wide, as UserCounts does.
func (s *Store) UserCount(ctx context.Context, app, channel string) (int64, error) {
	n, err := s.UserCounts(ctx, app, []string{channel})
	return n[channel], err
}

// Connections returns the app's open sockets cluster-wide, leaving out
// what the reaps under way still hold (see exact.go).
func (s *Store) Connections(ctx context.Context, app string) (int64, error) {
	v, err := s.runExact(ctx, s.rdb, connsScript, app, []string{s.connsKey(app)})
	var n int64
	if l, _ := v.([]any); err == nil && len(l) == 1 {
		n, err = toInt(l[0])
	} else if err == nil {
		err = fmt.Errorf("%d values, want 1", len(l))
	}
	if err != nil {
		return 0, fmt.Errorf("count connections: %w", err)
	}
	return n, nil
}

// parseField splits a contribution field into its kind ('c', 'm' or 'n'),
// channel and user.
func parseField(f string) (kind byte, channel, user string) {
	switch {
	case strings.HasPrefix(f, "c:"):
		return 'c', f[2:], ""
	case strings.HasPrefix(f, "m:"):
		channel, user, _ = strings.Cut(f[2:], "\n")
		return 'm', channel, user
	}
	return f[0], "", ""
}

// UserCounts returns the distinct users of each presence channel
// cluster-wide, leaving out users whose sockets are all on reaps under way
// (see exact.go): one script per userCountsSlice channels, each exact when
// it ran.
func (s *Store) UserCounts(ctx context.Context, app string, channels []string) (map[string]int64, error) {
	out := make(map[string]int64, len(channels))
	for len(channels) > 0 {
		k := min(len(channels), userCountsSlice)
		if err := s.userCounts(ctx, app, channels[:k], out); err != nil {
			return nil, err
		}
		channels = channels[k:]
	}
	return out, nil
}

// userCountsSlice bounds the channels one script of UserCounts reads.
const userCountsSlice = 500

func (s *Store) userCounts(ctx context.Context, app string, channels []string, out map[string]int64) error {
	ks := make([]string, len(channels))
	args := make([]any, len(channels))
	for i, ch := range channels {
		ks[i], args[i] = s.membersKey(app, ch), ch
	}
	res, err := s.runExact(ctx, s.rdb, usersScript, app, ks, args...)
	v, _ := res.([]any)
	if err == nil && len(v) != len(channels) {
		err = fmt.Errorf("%d values, want %d", len(v), len(channels))
	}
	for i := 0; err == nil && i < len(v); i++ {
		out[channels[i]], err = toInt(v[i])
	}
	if err != nil {
		return fmt.Errorf("count users: %w", err)
	}
	return nil
}

// AreMembers reports, for each of users, whether they are a member of
// channel cluster-wide right now (one HMGET): a watchlist's first status
// reads SignedInChannel this way. Like MembersAt it reads the global
// members, which the online and offline edges that follow are of.
func (s *Store) AreMembers(ctx context.Context, app, channel string, users []string) ([]bool, error) {
	out := make([]bool, len(users))
	if len(users) == 0 {
		return out, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.membersKey(app, channel), users...).Result()
	if err != nil {
		return nil, fmt.Errorf("read members of %s: %w", channel, err)
	}
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}
