package counts

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// seedChannels publishes counts as node's contribution in one flush.
func seedChannels(t testing.TB, rdb redis.UniversalClient, node, app string, counts map[string]int64) *Recorder {
	t.Helper()
	r := newRecorder(t, rdb, node)
	for ch, n := range counts {
		r.Add(app, ch, n)
	}
	require.NoError(t, r.Flush(context.Background()))
	return r
}

func TestFreshness(t *testing.T) {
	// Not parallel: its live node must heartbeat within the 300 ms
	// stale-after, which tests beside it stretch past on two cores.
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		l := NewListings(rdb, ListingOptions{StaleAfter: 300 * time.Millisecond})
		f, err := l.Freshness(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, 0, f.Nodes)
		require.Zero(t, f.OldestHeartbeat)
		require.WithinDuration(t, time.Now(), f.ReadAt, 5*time.Second)

		// One node keeps heartbeating; the other wrote once and stopped.
		seedChannels(t, rdb, "gone", "app", map[string]int64{"a": 1})
		alive := NewRecorder(rdb, "alive", RecorderOptions{Heartbeat: 20 * time.Millisecond})
		alive.Add("app", "b", 1)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- alive.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done }) //nolint:errcheck // waits for Run to end; the test checks what it wrote

		require.Eventually(t, func() bool {
			f, err = l.Freshness(ctx, "app")
			return err == nil && f.Nodes == 2 && f.Stale == 1
		}, 10*time.Second, 10*time.Millisecond, "last %+v", f)
		require.GreaterOrEqual(t, f.OldestHeartbeat, 300*time.Millisecond)
		// The same numbers come with every read.
		_, f2, err := l.Channel(ctx, "app", "a", false, false)
		require.NoError(t, err)
		require.Equal(t, 2, f2.Nodes)
		require.Equal(t, 1, f2.Stale)
		require.GreaterOrEqual(t, f2.OldestHeartbeat, f.OldestHeartbeat)
	})
}

// TestSlicedReadsWhileCountsChange reads full listings and starts walks
// two channels per command while another node occupies and vacates other
// channels as fast as it can: every channel occupied throughout is listed
// once with its exact count, and nothing is listed that was never
// occupied.
func TestSlicedReadsWhileCountsChange(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		stable := map[string]int64{}
		for i := range 300 {
			stable[fmt.Sprintf("s%03d", i)] = int64(i%5 + 1)
		}
		seedChannels(t, rdb, "n1", "app", stable)
		churn := newRecorder(t, rdb, "n2")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Occupy x000..x199 in turn, then vacate them in turn.
				delta := int64(1)
				if (i/200)%2 == 1 {
					delta = -1
				}
				churn.Add("app", fmt.Sprintf("x%03d", i%200), delta)
				_ = churn.Flush(ctx)
			}
		})
		defer func() { close(stop); wg.Wait() }()
		l := NewListings(rdb, ListingOptions{ScanCount: 2, CacheTTL: -1, SnapshotReuse: time.Millisecond})
		check := func(what string, got map[string]int64) {
			t.Helper()
			for ch, n := range stable {
				require.Equal(t, n, got[ch], "%s: %s", what, ch)
			}
			for ch := range got {
				if _, ok := stable[ch]; !ok {
					require.Regexp(t, `^x\d{3}$`, ch, what)
				}
			}
		}
		for range 3 {
			ls, err := l.ReadListing(ctx, "app", ListingQuery{})
			require.NoError(t, err)
			check("listing", ls.Channels)
			got := map[string]int64{}
			for _, c := range walk(t, l, "app", "", 97, nil) {
				got[c.Name] = c.Count
			}
			check("walk", got)
			sub, err := l.ReadListing(ctx, "app", ListingQuery{Prefix: "s1"})
			require.NoError(t, err)
			require.Len(t, sub.Channels, 100)
		}
	})
}
