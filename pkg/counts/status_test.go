package counts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// TestNodeStatuses: every registered node with its connections and its
// last-seen age by Redis's clock; a node that stops writing ages, a reaped
// one is gone.
func TestNodeStatuses(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		nodes, _, err := store.NodeStatuses(ctx, "app")
		require.NoError(t, err)
		require.Empty(t, nodes, "no node has had counts yet")

		old, live := newRecorder(t, rdb, "old"), newRecorder(t, rdb, "live")
		old.AddConnections("app", 3)
		old.Add("app", "room", 3)
		require.NoError(t, old.Flush(ctx))
		live.AddConnections("app", 1)
		live.Add("app", "room", 1)
		require.NoError(t, live.Flush(ctx))
		quiet := newRecorder(t, rdb, "quiet") // counts in another app only
		quiet.AddConnections("other", 1)
		require.NoError(t, quiet.Flush(ctx))

		// Heartbeat live until old is visibly older, by Redis's clock.
		var got []NodeStatus
		var now time.Time
		deadline := time.Now().Add(10 * time.Second)
		for {
			require.NoError(t, live.Heartbeat(ctx))
			got, now, err = store.NodeStatuses(ctx, "app")
			require.NoError(t, err)
			if len(got) == 2 && got[0].Age >= 200*time.Millisecond {
				break
			}
			require.False(t, time.Now().After(deadline), "old never aged: %+v", got)
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, "old", got[0].ID, "oldest heartbeat first")
		require.EqualValues(t, 3, got[0].Connections)
		require.Equal(t, "live", got[1].ID)
		require.EqualValues(t, 1, got[1].Connections)
		require.Less(t, got[1].Age, got[0].Age)
		require.Equal(t, now.Sub(got[0].LastSeen), got[0].Age, "age is by the read's own clock")
		require.WithinDuration(t, time.Now(), now, 5*time.Second, "the time is Redis's")

		reaped, _, err := store.ReapNode(ctx, "app", "old", 100*time.Millisecond)
		require.NoError(t, err)
		require.True(t, reaped)
		got, _, err = store.NodeStatuses(ctx, "app")
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, "live", got[0].ID)
	})
}
