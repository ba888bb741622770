package counts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
