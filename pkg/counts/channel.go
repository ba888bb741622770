package counts

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/channel.lua
	channelSrc string

	channelScript = redis.NewScript(freshLibSrc + channelSrc)
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
