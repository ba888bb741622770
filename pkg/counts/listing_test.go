package counts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
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

func TestLeaderboardAndRank(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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

// walk pages through app with prefix and returns every name in order,
// failing on a duplicate.
func walk(t testing.TB, l *Listings, app, prefix string, limit int, between func(page int)) []ChannelCount {
	t.Helper()
	var out []ChannelCount
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		pg, _, err := l.Page(context.Background(), app, prefix, cursor, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(pg.Channels), limit)
		for _, c := range pg.Channels {
			require.False(t, seen[c.Name], "duplicate %s on page %d", c.Name, page)
			seen[c.Name] = true
			if len(out) > 0 {
				require.Less(t, out[len(out)-1].Name, c.Name, "order")
			}
			out = append(out, c)
		}
		if pg.Next == "" {
			return out
		}
		cursor = pg.Next
		if between != nil {
			between(page)
		}
	}
}

func TestPaging100k(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 channels in -short")
	}
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		const n = 100000
		want := make(map[string]int64, n)
		for i := range n {
			want[fmt.Sprintf("ch-%06d", i)] = int64(i%7 + 1)
		}
		start := time.Now()
		seedChannels(t, rdb, "n1", "big", want)
		t.Logf("seeded %d channels in %v", n, time.Since(start))
		l := NewListings(rdb, ListingOptions{})

		start = time.Now()
		got := walk(t, l, "big", "", 1000, nil)
		t.Logf("walked %d channels in pages of 1000 in %v", len(got), time.Since(start))
		require.Len(t, got, n)
		for _, c := range got {
			require.Equal(t, want[c.Name], c.Count, c.Name)
		}
		// A prefix walk reads only its own range.
		sub := walk(t, l, "big", "ch-05", 777, nil)
		require.Len(t, sub, 10000)
		require.Equal(t, "ch-050000", sub[0].Name)
		require.Equal(t, "ch-059999", sub[len(sub)-1].Name)
		none := walk(t, l, "big", "zz", 10, nil)
		require.Empty(t, none)
	})
}

// TestPagingWhileCountsChange vacates and occupies channels between pages:
// channels occupied throughout are listed exactly once, in order; a channel
// vacated before its page is skipped; one occupied after the walk began is
// not listed.
func TestPagingWhileCountsChange(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seed := map[string]int64{}
		for i := range 1000 {
			seed[fmt.Sprintf("c%04d", i)] = 3
		}
		r := seedChannels(t, rdb, "n1", "app", seed)
		l := NewListings(rdb, ListingOptions{})
		vacated := map[string]bool{}
		got := walk(t, l, "app", "", 100, func(page int) {
			// Ahead of the cursor: vacate one, occupy a new one, and move
			// counts (reordering the live set, not the walk).
			if (page+2)*100 >= 1000 {
				return
			}
			v := fmt.Sprintf("c%04d", (page+2)*100+50)
			r.Add("app", v, -3)
			vacated[v] = true
			r.Add("app", fmt.Sprintf("c%04d-new", (page+2)*100), 1)
			r.Add("app", fmt.Sprintf("c%04d", (page+2)*100+1), 40)
			require.NoError(t, r.Flush(ctx))
		})
		names := map[string]bool{}
		for _, c := range got {
			names[c.Name] = true
		}
		for ch := range seed {
			require.Equal(t, !vacated[ch], names[ch], ch)
		}
		require.Equal(t, len(seed)-len(vacated), len(got))
		require.Len(t, vacated, 8)
	})
}

func TestPagingErrors(t *testing.T) {
	rdb := newSingle(t)
	ctx := context.Background()
	l := NewListings(rdb, ListingOptions{SnapshotIdleTTL: time.Minute})
	seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 1, "b": 1, "c": 1})

	for _, c := range []string{"!!", "YWJj", encodeCursor("short", "a"), encodeCursor("0123456789abcdeZ", "a")} {
		_, _, err := l.Page(ctx, "app", "", c, 10)
		require.ErrorIs(t, err, ErrBadCursor, c)
		require.False(t, ValidCursor(c))
	}
	pg, _, err := l.Page(ctx, "app", "", "", 2)
	require.NoError(t, err)
	require.Equal(t, []ChannelCount{{"a", 1}, {"b", 1}}, pg.Channels)
	require.True(t, ValidCursor(pg.Next))
	// Another app has no such snapshot.
	_, _, err = l.Page(ctx, "other", "", pg.Next, 2)
	require.ErrorIs(t, err, ErrCursorExpired)
	// Snapshots expire.
	id, _, err := decodeCursor(pg.Next)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, testKeys.snapshotKey("app", id)).Err())
	_, _, err = l.Page(ctx, "app", "", pg.Next, 2)
	require.ErrorIs(t, err, ErrCursorExpired)
	// An app without channels is one empty page.
	pg, _, err = l.Page(ctx, "empty", "", "", 2)
	require.NoError(t, err)
	require.Equal(t, Page{}, pg)
}

func TestLexRange(t *testing.T) {
	for _, tc := range []struct{ prefix, last, min, max string }{
		{"", "", "-", "+"},
		{"ab", "", "[ab", "(ac"},
		{"ab", "abc", "(abc", "(ac"},
		{"ab", "aa", "[ab", "(ac"}, // a cursor before the prefix: start at the prefix
		{"a\xff", "", "[a\xff", "(b"},
		{"\xff", "", "[\xff", "+"},
	} {
		lo, hi := lexRange(tc.prefix, tc.last)
		require.Equal(t, tc.min, lo, "%q %q", tc.prefix, tc.last)
		require.Equal(t, tc.max, hi, "%q %q", tc.prefix, tc.last)
	}
}

// countingEncode encodes a listing as its sorted names and counts calls.
func countingEncode(calls *atomic.Int64, gate <-chan struct{}) func(Listing) ([]byte, error) {
	return func(ls Listing) ([]byte, error) {
		calls.Add(1)
		if gate != nil {
			<-gate
		}
		names := make([]string, 0, len(ls.Channels))
		for n := range ls.Channels {
			names = append(names, n)
		}
		slices.Sort(names)
		return fmt.Appendf(nil, "%v", names), nil
	}
}

// TestSharedListingComputesOnce: 50 concurrent identical requests over three
// "replicas" (Listings on their own clients) compute the listing once.
func TestSharedListingComputesOnce(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 1, "b": 2, "c": 3})
		replicas := make([]*Listings, 3)
		for i := range replicas {
			replicas[i] = NewListings(rdb, ListingOptions{CacheTTL: time.Minute, LockTTL: 30 * time.Second})
		}
		var calls atomic.Int64
		// The computation waits until every request has started, so most of
		// them find the lock taken rather than the result cached.
		gate := make(chan struct{})
		var started sync.WaitGroup
		started.Add(50)
		go func() { started.Wait(); close(gate) }()
		results := make([]SharedResult, 50)
		errs := make([]error, 50)
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				started.Done()
				results[i], errs[i] = replicas[i%3].SharedListing(ctx, "app", ListingQuery{}, countingEncode(&calls, gate))
			}()
		}
		wg.Wait()
		require.EqualValues(t, 1, calls.Load())
		sources := map[Source]int{}
		for i, r := range results {
			require.NoError(t, errs[i])
			require.Equal(t, "[a b c]", string(r.Body))
			require.Equal(t, 1, r.Fresh.Nodes)
			sources[r.Source]++
		}
		require.Equal(t, 1, sources[Computed], sources)
		t.Logf("sources: %v", sources)

		// A vacated channel invalidates the cached listing at once.
		r := newRecorder(t, rdb, "n1b")
		r.Add("app", "d", 1)
		require.NoError(t, r.Flush(ctx))
		res, err := replicas[0].SharedListing(ctx, "app", ListingQuery{}, countingEncode(&calls, nil))
		require.NoError(t, err)
		require.Equal(t, Computed, res.Source)
		require.Equal(t, "[a b c d]", string(res.Body))
		res, err = replicas[1].SharedListing(ctx, "app", ListingQuery{}, countingEncode(&calls, nil))
		require.NoError(t, err)
		require.Equal(t, Cached, res.Source)
		// Other variants are cached apart.
		res, err = replicas[1].SharedListing(ctx, "app", ListingQuery{Prefix: "b"}, countingEncode(&calls, nil))
		require.NoError(t, err)
		require.Equal(t, Computed, res.Source)
		require.Equal(t, "[b]", string(res.Body))
	})
}

// TestSharedListingHolderDies: a caller takes the lock and never publishes
// (its process died: its Redis connections are gone, so it renews nothing);
// the others wait for the lock to expire, then one of them computes and all
// get the listing.
func TestSharedListingHolderDies(t *testing.T) {
	rdb := newSingle(t)
	seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 1})
	const lockTTL = 300 * time.Millisecond
	deadConn := redis.NewClient(rdb.(*redis.Client).Options())
	dead := NewListings(deadConn, ListingOptions{CacheTTL: time.Minute, LockTTL: lockTTL})
	holding := make(chan struct{})
	hctx, kill := context.WithCancel(context.Background())
	holderDone := make(chan error, 1)
	go func() {
		_, err := dead.SharedListing(hctx, "app", ListingQuery{}, func(Listing) ([]byte, error) {
			close(holding)
			<-hctx.Done()
			return nil, hctx.Err()
		})
		holderDone <- err
	}()
	<-holding
	require.NoError(t, deadConn.Close())
	start := time.Now()
	var calls atomic.Int64
	live := NewListings(rdb, ListingOptions{CacheTTL: time.Minute, LockTTL: lockTTL})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := live.SharedListing(ctx, "app", ListingQuery{}, countingEncode(&calls, nil))
			if !errors.Is(err, nil) {
				t.Error(err)
				return
			}
			if string(res.Body) != "[a]" {
				t.Errorf("body %q", res.Body)
			}
		}()
	}
	wg.Wait()
	waited := time.Since(start)
	kill()
	require.Error(t, <-holderDone)
	require.EqualValues(t, 1, calls.Load(), "one survivor computes")
	require.Less(t, waited, lockTTL+2*time.Second, "waiters are bounded by the lock TTL")
	t.Logf("survivors answered %v after the holder died (lock TTL %v)", waited.Round(time.Millisecond), lockTTL)
}

// TestSharedListingRenewsLock: a computation lasting several lock TTLs keeps
// its lock, so the callers waiting on other replicas take its result rather
// than computing the same listing again.
func TestSharedListingRenewsLock(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 1})
		const lockTTL = 100 * time.Millisecond
		opts := ListingOptions{CacheTTL: time.Minute, LockTTL: lockTTL}
		var calls atomic.Int64
		gate := make(chan struct{})
		holder := make(chan error, 1)
		go func() {
			_, err := NewListings(rdb, opts).SharedListing(ctx, "app", ListingQuery{}, countingEncode(&calls, gate))
			holder <- err
		}()
		deadline := time.Now().Add(5 * time.Second)
		for calls.Load() == 0 {
			require.True(t, time.Now().Before(deadline), "the holder never started computing")
			time.Sleep(time.Millisecond)
		}
		results := make([]SharedResult, 5)
		errs := make([]error, 5)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				results[i], errs[i] = NewListings(rdb, opts).SharedListing(ctx, "app", ListingQuery{}, countingEncode(&calls, nil))
			})
		}
		time.Sleep(5 * lockTTL) // the slow computation, not a wait for a condition
		close(gate)
		wg.Wait()
		require.NoError(t, <-holder)
		require.EqualValues(t, 1, calls.Load(), "a waiter computed while the holder still worked")
		for i, r := range results {
			require.NoError(t, errs[i])
			require.Equal(t, Waited, r.Source)
			require.Equal(t, "[a]", string(r.Body))
		}
	})
}

func TestFreshness(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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

// TestWalksStartedTogetherShareOneCopy starts walks at once on several
// clients while the first copy is still going (two names per command):
// one caller copies, the others wait for its snapshot.
func TestWalksStartedTogetherShareOneCopy(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seed := map[string]int64{}
		for i := range 2000 {
			seed[fmt.Sprintf("c%04d", i)] = 1
		}
		seedChannels(t, rdb, "n1", "app", seed)
		ids := make(chan string, 8)
		var wg sync.WaitGroup
		for range cap(ids) {
			l := NewListings(rdb, ListingOptions{ScanCount: 2})
			wg.Go(func() {
				pg, _, err := l.Page(ctx, "app", "", "", 10)
				require.NoError(t, err)
				id, _, err := decodeCursor(pg.Next)
				require.NoError(t, err)
				ids <- id
			})
		}
		wg.Wait()
		close(ids)
		var got []string
		for id := range ids {
			got = append(got, id)
		}
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(got))), 1, "snapshots: %v", got)
	})
}
