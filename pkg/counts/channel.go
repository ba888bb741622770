package counts

import (
	"context"
	"fmt"
	"strconv"
)

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
// call), leaving out what the reaps under way still hold (see exact.go).
// O(log n) in the app's occupied channels; while a reap is under way the
// rank is counted around them, O(log^2 n + reapWindow * reaps^2), and is
// exact while each holds at most about reapWindow fields (beyond, it may
// place the channel lower, never higher).
func (l *Listings) Channel(ctx context.Context, app, channel string, users, rank bool) (ChannelStats, Freshness, error) {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	res, err := l.runExact(ctx, l.rdb, channelScript, app, []string{l.globalKey(app), l.nodesKey(app), l.membersKey(app, channel)},
		channel, l.opts.StaleAfter.Milliseconds(), flag(rank), flag(users))
	v, _ := res.([]any)
	if err != nil {
		return ChannelStats{}, Freshness{}, fmt.Errorf("read channel %s: %w", channel, err)
	}
	if len(v) != 4 {
		return ChannelStats{}, Freshness{}, fmt.Errorf("read channel %s: %d values, want 4", channel, len(v))
	}
	f, err := freshnessReply(v[0])
	if err != nil {
		return ChannelStats{}, Freshness{}, fmt.Errorf("read channel %s: %w", channel, err)
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
// (Redis's ZREVRANGE order, so the i-th entry has Rank i+1), in one
// atomic read, leaving out what the reaps under way still hold (see
// exact.go). O(log n + limit); while a reap is under way it reads past
// the limit until what it read is the top, at most topWindow channels
// more (O((limit + topWindow) * (1 + reaps))): should a reap hold more
// of the first channels than that, fewer than limit come, never a wrong
// one.
func (l *Listings) Top(ctx context.Context, app string, limit int) ([]ChannelCount, Freshness, error) {
	if limit <= 0 {
		return nil, Freshness{}, fmt.Errorf("leaderboard: limit %d is not positive", limit)
	}
	res, err := l.runExact(ctx, l.rdb, topScript, app, []string{l.globalKey(app), l.nodesKey(app)}, limit, l.opts.StaleAfter.Milliseconds())
	v, _ := res.([]any)
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("%d values, want 2", len(v))
	}
	if err != nil {
		return nil, Freshness{}, fmt.Errorf("read leaderboard: %w", err)
	}
	f, err := freshnessReply(v[0])
	if err != nil {
		return nil, Freshness{}, fmt.Errorf("read leaderboard: %w", err)
	}
	kv, _ := v[1].([]any)
	out := make([]ChannelCount, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		name, _ := kv[i].(string)
		s, _ := kv[i+1].(string)
		if n, err := strconv.ParseFloat(s, 64); err == nil && n > 0 {
			out = append(out, ChannelCount{Name: name, Count: int64(n)})
		}
	}
	return out, f, nil
}

// freshnessReply parses freshness (freshlib.lua) returned inside a
// script's reply.
func freshnessReply(v any) (Freshness, error) {
	fv, _ := v.([]any)
	ints := make([]int64, 0, len(fv))
	for _, x := range fv {
		n, err := toInt(x)
		if err != nil {
			return Freshness{}, fmt.Errorf("freshness: %w", err)
		}
		ints = append(ints, n)
	}
	return freshnessFrom(ints)
}
