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

	"github.com/headcount/headcount/internal/redistest"
)

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
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
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
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		seedChannels(t, rdb, "n1", "app", map[string]int64{"a": 1})
		// Long enough that a renewal is not late on a loaded 2-core
		// machine under -race (100 ms was, once: a waiter computed).
		const lockTTL = 250 * time.Millisecond
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

// TestSharedListingDropsADeadNodeAtOnce: a listing cached before a node's
// death (with a TTL of a minute) is not served once the node's reap has
// started: the next listing leaves its sockets out, as every read does.
func TestSharedListingDropsADeadNodeAtOnce(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		live, dead := newRecorder(t, rdb, "live"), newRecorder(t, rdb, "dead")
		live.Add("app", "a", 1)
		dead.Add("app", "a", 2)
		dead.Add("app", "b", 1)
		require.NoError(t, live.Flush(ctx))
		require.NoError(t, dead.Flush(ctx))
		l := NewListings(rdb, ListingOptions{CacheTTL: time.Minute, LockTTL: 30 * time.Second})
		var calls atomic.Int64
		encode := func(ls Listing) ([]byte, error) {
			calls.Add(1)
			return fmt.Appendf(nil, "%v", ls.Channels), nil
		}
		res, err := l.SharedListing(ctx, "app", ListingQuery{}, encode)
		require.NoError(t, err)
		require.Equal(t, "map[a:3 b:1]", string(res.Body))
		res, err = l.SharedListing(ctx, "app", ListingQuery{}, encode)
		require.NoError(t, err)
		require.Equal(t, Cached, res.Source, "the listing is cached")

		_, ok, _, err := store.startReap(ctx, "app", "dead", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		res, err = l.SharedListing(ctx, "app", ListingQuery{}, encode)
		require.NoError(t, err)
		require.Equal(t, "map[a:1]", string(res.Body), "a listing cached before the death is not served after it (%s)", res.Source)
		require.Equal(t, int64(2), calls.Load())
	})
}
