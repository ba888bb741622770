package counts

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// PendingCounts is a read of one channel's counts queued on a pipeline that
// the caller executes (for the HTTP API, the pipeline of its publishes, so
// an event and the counts reported with it take one round trip).
type PendingCounts struct {
	channel string
	subs    *redis.FloatCmd
	users   *redis.IntCmd // nil unless asked for
}

// QueueCounts queues on p the reads of channel's global subscription count
// and, if users is set, its distinct presence users. The keys carry app's
// hash tag, so on Redis Cluster they share a slot with everything else of
// app. Call Result after p has been executed.
func (s *Store) QueueCounts(ctx context.Context, p redis.Pipeliner, app, channel string, users bool) *PendingCounts {
	pc := &PendingCounts{channel: channel, subs: p.ZScore(ctx, s.globalKey(app), channel)}
	if users {
		pc.users = p.HLen(ctx, s.membersKey(app, channel))
	}
	return pc
}

// Result returns the counts read: subscriptions (0 for a vacant channel)
// and distinct users (0 unless asked for).
func (pc *PendingCounts) Result() (subscriptions, users int64, err error) {
	n, err := pc.subs.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("read channel count of %s: %w", pc.channel, err)
	}
	if pc.users != nil {
		if users, err = pc.users.Result(); err != nil {
			return 0, 0, fmt.Errorf("count users of %s: %w", pc.channel, err)
		}
	}
	return int64(n), users, nil
}

// HasUsers reports whether the distinct users were queued too.
func (pc *PendingCounts) HasUsers() bool { return pc.users != nil }
