package counts

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// PendingCounts is a read of one channel's counts queued on a pipeline that
// the caller executes (for the HTTP API, the pipeline of its publishes, so
// an event and the counts reported with it take one round trip).
type PendingCounts struct {
	s            *Store
	app, channel string
	users        string   // "1" if asked for
	declared     []string // the reaps the queued read declares (see runExact)
	cmd          *redis.Cmd
}

// QueueCounts queues on p the read of channel's subscription count and, if
// users is set, its distinct presence users, leaving out what the reaps
// under way still hold (see exact.go). The keys carry app's hash tag, so
// on Redis Cluster they share a slot with everything else of app. Call
// Result after p has been executed.
func (s *Store) QueueCounts(ctx context.Context, p redis.Pipeliner, app, channel string, users bool) *PendingCounts {
	pc := &PendingCounts{s: s, app: app, channel: channel, users: "0"}
	if users {
		pc.users = "1"
	}
	pc.declared = s.seen.of(app)
	pc.cmd = p.EvalSha(ctx, countsScript.Hash(), pc.keys(pc.declared), pc.channel, pc.users)
	return pc
}

func (pc *PendingCounts) keys(reaps []string) []string {
	return pc.s.withReaps([]string{pc.s.globalKey(pc.app), pc.s.membersKey(pc.app, pc.channel)}, pc.app, reaps)
}

// Result returns the counts read: subscriptions (0 for a vacant channel)
// and distinct users (0 unless asked for). When the pipeline's read could
// not answer (Redis did not have the script yet, or a reap is under way
// and its keys must be declared) it reads again within ctx, a round trip
// more.
func (pc *PendingCounts) Result(ctx context.Context) (subscriptions, users int64, err error) {
	v, err := pc.cmd.Result()
	if reaps, other := otherReaps(v); other || isNoScript(err) {
		if !other {
			reaps = pc.declared
		}
		v, err = pc.s.exactly(pc.app, reaps, func(reaps []string) (any, error) {
			return countsScript.Run(ctx, pc.s.rdb, pc.keys(reaps), pc.channel, pc.users).Result()
		})
	}
	if err == nil {
		subscriptions, users, err = countsOf(v)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read counts of %s: %w", pc.channel, err)
	}
	return subscriptions, max(users, 0), nil
}

// HasUsers reports whether the distinct users were queued too.
func (pc *PendingCounts) HasUsers() bool { return pc.users == "1" }
