package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/logging"
)

func TestLeaseIsTokenFenced(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	a := New(rdb, "lease", 200*time.Millisecond)
	b := New(rdb, "lease", 200*time.Millisecond)

	ok, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, a.Valid())
	ok, err = b.TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, ok, "held by a")
	require.ErrorIs(t, b.Renew(ctx), ErrNotHeld)
	require.NoError(t, b.Release(ctx)) // not the holder: must not drop a's lease
	require.NoError(t, a.Renew(ctx))

	// a stops renewing (paused); the key expires and b takes it.
	require.Eventually(t, func() bool { ok, err := b.TryAcquire(ctx); return err == nil && ok }, 5*time.Second, 10*time.Millisecond)
	require.False(t, a.Valid(), "a's lease ran out by its own clock")
	require.ErrorIs(t, a.Renew(ctx), ErrNotHeld, "a resumed and must learn it lost the lease")
	require.NoError(t, a.Release(ctx))
	require.Equal(t, b.Token(), rdb.Get(ctx, "lease").Val())
}

func TestElectorTakesOverWithinTTL(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	const ttl = 300 * time.Millisecond
	var active atomic.Int32
	var maxActive atomic.Int32
	run := func(ctx context.Context, name string, wg *sync.WaitGroup) {
		defer wg.Done()
		e := &Elector{Lease: New(rdb, "lease", ttl), Log: logging.TestLogger(t).Named(name)}
		_ = e.Run(ctx, func(ctx context.Context) {
			n := active.Add(1)
			for {
				if m := maxActive.Load(); n <= m || maxActive.CompareAndSwap(m, n) {
					break
				}
			}
			<-ctx.Done()
			active.Add(-1)
		})
	}
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go run(ctxA, "a", &wg)
	require.Eventually(t, func() bool { return active.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	wg.Add(1)
	go run(ctxB, "b", &wg)

	// a stops cleanly and releases, so b takes over at its next try.
	holder := rdb.Get(context.Background(), "lease").Val()
	stopA()
	start := time.Now()
	require.Eventually(t, func() bool {
		v := rdb.Get(context.Background(), "lease").Val()
		return v != "" && v != holder && active.Load() == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.Less(t, time.Since(start), ttl+ttl/3+200*time.Millisecond, "takeover within one TTL")
	stopB()
	wg.Wait()
	require.EqualValues(t, 1, maxActive.Load(), "never two active at once in one process")
}

func TestPassiveTakesOverFromACrashedHolder(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	const ttl = 300 * time.Millisecond
	crashed := New(rdb, "lease", ttl)
	ok, err := crashed.TryAcquire(context.Background())
	require.NoError(t, err)
	require.True(t, ok)
	start := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	became := make(chan time.Time, 1)
	e := &Elector{Lease: New(rdb, "lease", ttl), Log: logging.TestLogger(t)}
	go func() {
		_ = e.Run(ctx, func(ctx context.Context) {
			became <- time.Now()
			<-ctx.Done()
		})
	}()
	select {
	case at := <-became:
		// The holder never renews: the key expires after ttl, and the
		// passive side tries every ttl/3.
		require.GreaterOrEqual(t, at.Sub(start), ttl-20*time.Millisecond)
		require.Less(t, at.Sub(start), ttl+ttl/3+200*time.Millisecond)
	case <-time.After(5 * time.Second):
		t.Fatal("passive elector never took over")
	}
}

func TestElectorStepsDownWhenLeaseIsStolen(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes []bool
	var mu sync.Mutex
	e := &Elector{Lease: New(rdb, "lease", 300*time.Millisecond), Log: logging.TestLogger(t), OnChange: func(a bool) {
		mu.Lock()
		changes = append(changes, a)
		mu.Unlock()
	}}
	stopped := make(chan struct{})
	go func() {
		_ = e.Run(ctx, func(ctx context.Context) { <-ctx.Done(); close(stopped) })
	}()
	require.Eventually(t, func() bool { return rdb.Get(ctx, "lease").Val() == e.Lease.Token() }, 5*time.Second, 5*time.Millisecond)
	// Someone else's token appears (our lease expired during a pause and
	// another cleaner took it): the next renewal must stop the active side.
	require.NoError(t, rdb.Set(ctx, "lease", "other", 0).Err())
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("active side kept running after the lease was lost")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{true, false}, changes[:2])
}
