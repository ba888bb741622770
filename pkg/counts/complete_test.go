package counts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/logging"
)

// TestCompleteKey: the first registration a fresh Redis sees makes the
// app's counts complete at once; a node that finds its contribution gone
// (here Redis lost its data) puts that two heartbeats ahead of its
// republish, and a retire after a write of unknown outcome, the node still
// registered, does not move it.
func TestCompleteKey(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const hb = time.Hour
		rec := func(node string) *Recorder {
			return NewRecorder(rdb, node, RecorderOptions{Heartbeat: hb, Logger: logging.TestLogger(t)})
		}
		complete := func() int64 {
			t.Helper()
			v, err := rdb.Get(ctx, testKeys.completeKey("app")).Int64()
			require.NoError(t, err)
			return v
		}
		redisNow := func() int64 {
			t.Helper()
			now, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			return now.UnixMilli()
		}
		a, b := rec("a"), rec("b")
		a.Add("app", "c", 1)
		require.NoError(t, a.Flush(ctx))
		require.LessOrEqual(t, complete(), redisNow(), "a fresh Redis is complete at once")

		// Redis loses its data; the next writer finds its contribution gone.
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() }))
		} else {
			require.NoError(t, rdb.FlushAll(ctx).Err())
		}
		a.Add("app", "c", 1)
		require.NoError(t, a.Flush(ctx))
		lost := complete()
		require.Greater(t, lost, redisNow()+int64(hb/time.Millisecond), "complete only once every node had a heartbeat to republish")

		// A node new to the app registers: nothing to wait for.
		b.Add("app", "c", 1)
		require.NoError(t, b.Flush(ctx))
		require.Equal(t, lost, complete())

		// A write of unknown outcome: a republishes while registered.
		a.mu.Lock()
		a.apps["app"].registered = false
		a.mu.Unlock()
		require.NoError(t, a.Flush(ctx))
		require.Equal(t, lost, complete())
	})
}
