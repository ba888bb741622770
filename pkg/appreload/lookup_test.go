package appreload

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
)

// held is a real source that counts its reads and, from hold until
// release, keeps each read's result back once it has read: a slow
// database whose rows were read before a write the test makes meanwhile.
type held struct {
	apps.Source
	loads   atomic.Int64
	holding atomic.Bool
	entered chan struct{} // one value per read kept back
	hold    chan struct{}
}

// release lets every read kept back, and every later one, return.
func (h *held) release() {
	h.holding.Store(false)
	close(h.hold)
}

func newHeld(src apps.Source) *held {
	return &held{Source: src, entered: make(chan struct{}, 100), hold: make(chan struct{})}
}

func (h *held) Load(ctx context.Context) (*apps.Registry, error) {
	h.loads.Add(1)
	reg, err := h.Source.Load(ctx)
	if h.holding.Load() {
		h.entered <- struct{}{}
		select {
		case <-h.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return reg, err
}

// lookupKey looks key up in r as a wsnode's handshake does.
func lookupKey(r *Reloader, key string) bool {
	return r.Lookup(context.Background(), "key "+key, func() bool { return r.Registry.ByKey(key) != nil })
}

func looked(r *Reloader, result string) float64 {
	return testutil.ToFloat64(r.m.lookups.WithLabelValues(result))
}

// TestLookupServesANewAppAtOnce: with the poll an hour away and no watch
// (a file on a network filesystem, or a database), an app written to the
// source is served at the first request naming it.
func TestLookupServesANewAppAtOnce(t *testing.T) {
	p := plainFile(t, oneApp)
	reg, r := start(t, pollOnly{apps.NewFile(p)}, time.Hour)
	require.NoError(t, os.WriteFile(p, []byte(twoApps), 0o600))
	require.True(t, lookupKey(r, "kb"), "the new app's key looked up")
	require.NotNil(t, reg.ByID("b"))
	require.Equal(t, 1.0, looked(r, "found"))
	require.True(t, lookupKey(r, "ka"), "a served key")
	require.Equal(t, 1.0, looked(r, "found"), "a served key is no lookup")
}

// TestLookupWaitsForAReadStartedAfterIt: lookups share one read, and a
// miss arriving while a read is under way waits for the next one, which
// sees what was written before the miss: concurrent misses cost two reads
// in all, and every one of them finds the app written meanwhile.
func TestLookupWaitsForAReadStartedAfterIt(t *testing.T) {
	p := plainFile(t, oneApp)
	src := newHeld(pollOnly{apps.NewFile(p)})
	_, r := start(t, src, time.Hour)
	src.loads.Store(0) // start read it once
	src.holding.Store(true)

	first := make(chan bool)
	go func() { first <- lookupKey(r, "k0") }()
	<-src.entered // the first read has read the file, without kb
	require.NoError(t, os.WriteFile(p, []byte(twoApps), 0o600))

	const misses = 100
	results := make(chan bool, misses)
	for i := range misses {
		go func() {
			if i%2 == 0 {
				results <- lookupKey(r, "kb")
			} else {
				results <- !lookupKey(r, fmt.Sprintf("random-%d", i))
			}
		}()
	}
	eventually(t, 10*time.Second, func() bool {
		r.look.mu.Lock()
		defer r.look.mu.Unlock()
		return r.look.next != nil && r.look.next.waiters == misses
	}, "every miss waits for the next read")
	src.release()
	require.False(t, <-first, "the first read did not see kb")
	for range misses {
		require.True(t, <-results, "kb found, the random keys not")
	}
	require.Equal(t, int64(2), src.loads.Load(), "one read for the first miss, one for all the others")
	require.Equal(t, 50.0, looked(r, "found"))
	require.Equal(t, 51.0, looked(r, "unknown"))
}

// TestLookupFloodIsBounded: a flood of random keys costs a bounded rate of
// reads, a served key never waits for them, and keys looked up in vain are
// refused without a read for a few seconds.
func TestLookupFloodIsBounded(t *testing.T) {
	src := newHeld(pollOnly{apps.NewFile(plainFile(t, oneApp))})
	_, r := start(t, src, time.Hour)
	src.loads.Store(0) // start read it once
	src.holding.Store(true)
	began := time.Now()
	const flood = 2000
	var wg sync.WaitGroup
	for i := range flood {
		wg.Go(func() { lookupKey(r, fmt.Sprintf("flood-%d", i)) })
	}
	<-src.entered // a read is held: the flood waits on it
	require.True(t, lookupKey(r, "ka"), "a served key answered while the flood waits")
	src.release()
	wg.Wait()
	elapsed := time.Since(began)
	// One read at once, then at most one per lookupEvery.
	require.LessOrEqual(t, src.loads.Load(), int64(2+elapsed/lookupEvery), "reads for %d misses in %v", flood, elapsed)
	require.Equal(t, float64(flood), looked(r, "unknown"))

	loads := src.loads.Load()
	for i := range 100 {
		require.False(t, lookupKey(r, fmt.Sprintf("flood-%d", i)))
	}
	require.Equal(t, loads, src.loads.Load(), "keys just looked up in vain are not read for again")
	require.Equal(t, 100.0, looked(r, "remembered"))
}

// TestLookupSourceDown: a source that cannot be read keeps the answer
// (not served), counted as failed and logged.
func TestLookupSourceDown(t *testing.T) {
	src := &flaky{Source: pollOnly{apps.NewFile(plainFile(t, oneApp))}}
	var logs strings.Builder
	var mu sync.Mutex
	reg, err := src.Load(context.Background())
	require.NoError(t, err)
	r := &Reloader{Registry: reg, Source: src, Every: time.Hour, Registerer: prometheus.NewRegistry(),
		Log: hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logs}, Level: hclog.Info})}
	src.down.Store(true)
	require.False(t, lookupKey(r, "kb"))
	require.Equal(t, 1.0, looked(r, "failed"))
	require.Equal(t, 1.0, testutil.ToFloat64(r.m.reloads.WithLabelValues("failed")))
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), "cannot read the apps; the last loaded keep serving")
}

// TestRememberIsBounded: the names looked up in vain are a fixed-size set.
func TestRememberIsBounded(t *testing.T) {
	var l lookups
	l.slot = map[uint64]int{}
	until := time.Now().Add(time.Hour)
	for h := range uint64(3 * rememberMax) {
		l.remember(h+1, until)
	}
	require.Len(t, l.slot, rememberMax)
	_, newest := l.slot[3*rememberMax]
	_, oldest := l.slot[1]
	require.True(t, newest)
	require.False(t, oldest)
}
