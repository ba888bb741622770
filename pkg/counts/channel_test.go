package counts

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

func TestLeaderboardAndRank(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		l := NewListings(rdb, ListingOptions{})
		// b and c tie at 5: equal counts come in reverse name order.
		seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 9, "b": 5, "c": 5, "d": 1, "e": 7})

		top, f, err := l.Top(ctx, "app", 3)
		require.NoError(t, err)
		require.Equal(t, []ChannelCount{{"a", 9}, {"e", 7}, {"c", 5}}, top)
		require.Equal(t, 1, f.Nodes)
		all, _, err := l.Top(ctx, "app", 1000)
		require.NoError(t, err)
		require.Equal(t, []ChannelCount{{"a", 9}, {"e", 7}, {"c", 5}, {"b", 5}, {"d", 1}}, all)
		for i, cc := range all {
			st, _, err := l.Channel(ctx, "app", cc.Name, false, true)
			require.NoError(t, err)
			require.Equal(t, ChannelStats{Subscriptions: cc.Count, Rank: int64(i + 1)}, st, cc.Name)
		}
		st, _, err := l.Channel(ctx, "app", "vacant", true, true)
		require.NoError(t, err)
		require.Equal(t, ChannelStats{}, st)
		none, _, err := l.Top(ctx, "other-app", 10)
		require.NoError(t, err)
		require.Empty(t, none)
	})
}

// TestRankUnderConcurrentChanges climbs one channel from 1 to 60
// subscriptions, one flush per step, past channels fixed at 10, 20 ... 50,
// while readers poll. Every read must be internally consistent (the rank is
// the rank of the count read with it, the leaderboard is sorted), and since
// the climber only gains, a reader never sees its rank get worse.
func TestRankUnderConcurrentChanges(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		l := NewListings(rdb, ListingOptions{})
		fixed := map[string]int64{"f10": 10, "f20": 20, "f30": 30, "f40": 40, "f50": 50}
		seedChannels(t, rdb, "fixed", "app", fixed)
		climber := newRecorder(t, rdb, "climber")

		var done atomic.Bool
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lastRank := int64(1 << 62)
				for !done.Load() {
					st, _, err := l.Channel(ctx, "app", "climber", false, true)
					if err != nil {
						errs <- err
						return
					}
					if st.Subscriptions == 0 {
						continue
					}
					// The rank follows from the count read with it.
					want := int64(1)
					for _, n := range fixed {
						if n > st.Subscriptions || n == st.Subscriptions && "f" > "climber" {
							want++
						}
					}
					if st.Rank != want || st.Rank > lastRank {
						errs <- fmt.Errorf("climber at %d has rank %d (want %d, previously %d)", st.Subscriptions, st.Rank, want, lastRank)
						return
					}
					lastRank = st.Rank
					top, _, err := l.Top(ctx, "app", 6)
					if err != nil {
						errs <- err
						return
					}
					if !slices.IsSortedFunc(top, func(a, b ChannelCount) int { return int(b.Count - a.Count) }) {
						errs <- fmt.Errorf("leaderboard out of order: %v", top)
						return
					}
				}
			}()
		}
		for range 60 {
			climber.Add("app", "climber", 1)
			require.NoError(t, climber.Flush(ctx))
		}
		done.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		top, _, err := l.Top(ctx, "app", 2)
		require.NoError(t, err)
		require.Equal(t, []ChannelCount{{"climber", 60}, {"f50", 50}}, top)
	})
}
