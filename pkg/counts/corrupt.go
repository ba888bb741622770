package counts

import (
	"context"
	"fmt"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
)

// CorruptChannel adds delta to channel's global count of app (in ks) behind every
// script's back, breaking invariant 1 on purpose. It exists so tests of
// the audit outside this package (the cleaner, its command) can make drift
// without spelling this package's keys; nothing else may call it.
func CorruptChannel(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, app, channel string, delta int64) error {
	if err := rdb.ZIncrBy(ctx, keys{ks: ks}.globalKey(app), float64(delta), channel).Err(); err != nil {
		return fmt.Errorf("corrupt channel %s of app %s: %w", channel, app, err)
	}
	return nil
}
