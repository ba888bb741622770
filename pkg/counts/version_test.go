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

// TestVersionsOrderUnitsAcrossNodes: every unit that changes a count gives
// its counts a version above every earlier unit's of the app, whichever
// node or cleaner ran it, and after the key holding the last one is lost
// (Redis restarted empty) versions still go up.
func TestVersionsOrderUnitsAcrossNodes(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		var got []Edges
		rec := func(node string) *Recorder {
			return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t),
				OnFlushed: func(e Edges) { got = append(got, e) }})
		}
		a, b := rec("a"), rec("b")
		last := int64(0)
		step := func(r *Recorder, delta int64) {
			t.Helper()
			got = nil
			r.Add("app", "ch", delta)
			require.NoError(t, r.Flush(ctx))
			require.Len(t, got, 1)
			v := got[0].Versions["ch"]
			require.Greater(t, v, last, "a later unit's count has a later version")
			last = v
		}
		for range 5 {
			step(a, 1)
			step(b, 1)
		}
		// Redis lost the key: the shard's clock keeps versions going up.
		require.NoError(t, rdb.Del(ctx, testKeys.versionKey("app")).Err())
		step(a, -1)

		// A reap's slices: each channel keeps its latest count.
		s := NewStore(rdb, testKeys.ks)
		s.SliceSize = 1
		for i := range 4 {
			a.Add("app", "r"+string(rune('0'+i)), 1)
		}
		require.NoError(t, a.Flush(ctx))
		_, reaped, err := s.RemoveNode(ctx, "app", "a")
		require.NoError(t, err)
		require.Len(t, reaped.Channels, 5, "ch and r0..r3")
		for ch, v := range reaped.Versions {
			require.Greater(t, v, last, "channel %s", ch)
		}
	})
}

// TestMergeKeepsLatestCount: merging edges keeps each channel's count of
// the highest version, whatever the order of the merge.
func TestMergeKeepsLatestCount(t *testing.T) {
	t.Parallel()
	older := Edges{App: "app", Channels: map[string]int64{"x": 5, "y": 1}, Versions: map[string]int64{"x": 10, "y": 10},
		Members: []MemberEdge{{Channel: "presence-p", UserID: "u", Added: true}}}
	newer := Edges{App: "app", Channels: map[string]int64{"x": 3}, Versions: map[string]int64{"x": 11},
		Members: []MemberEdge{{Channel: "presence-p", UserID: "u"}}}

	var e Edges
	e.merge(older)
	e.merge(newer)
	require.Equal(t, map[string]int64{"x": 3, "y": 1}, e.Channels)
	require.Equal(t, map[string]int64{"x": 11, "y": 10}, e.Versions)
	require.Len(t, e.Members, 2)

	e = Edges{}
	e.merge(newer)
	e.merge(older)
	require.Equal(t, map[string]int64{"x": 3, "y": 1}, e.Channels, "an older unit merged second does not win")
	require.Equal(t, map[string]int64{"x": 11, "y": 10}, e.Versions)
}
