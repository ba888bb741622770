package counts

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/redisx"
)

// BenchmarkApply measures subscription changes applied to Redis from one
// node during a storm (8 goroutines subscribing sockets), with the
// recorder's coalescing and without it (one atomic unit per change, what a
// node that writes through would do). Changes spread over 1,000 channels
// (hot channels net out within a window) or over 1,000,000 (nearly every
// change is a channel of its own: coalescing can only batch, not net). It
// reports changes/s, Redis round trips per 1,000 changes, the Redis
// server's CPU time (user + system, from INFO cpu) per 1,000 changes, and
// Redis's time per apply.lua call (usec_per_call of EVALSHA, from INFO
// commandstats: every EVALSHA here is one).
func BenchmarkApply(b *testing.B) {
	const writers = 8
	srv := redistest.New(b)
	for _, c := range []struct {
		mode     string
		channels int
	}{{"coalesced", 1000}, {"coalesced", 1000000}, {"per-change", 1000}} {
		mode, channels := c.mode, c.channels
		b.Run(fmt.Sprintf("%s/channels=%d", mode, channels), func(b *testing.B) {
			rt := &redisx.RoundTrips{}
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2 * writers})
			defer rdb.Close()
			rdb.AddHook(rt)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			app := fmt.Sprintf("bench-%s-%d-%d", mode, channels, b.N)
			r := NewRecorder(rdb, "bench", RecorderOptions{Heartbeat: time.Hour, Coalesce: 2 * time.Millisecond})
			if err := r.Heartbeat(ctx); err != nil {
				b.Fatal(err)
			}
			r.Add(app, "warmup", 1)
			if err := r.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			before := rt.Count()
			cpuBefore := redisCPU(b, rdb)
			callsBefore, usecBefore := evalshaStats(b, rdb)
			b.ResetTimer()
			start := time.Now()
			if mode == "coalesced" {
				go func() { _ = r.Run(ctx) }()
			}
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						ch := fmt.Sprintf("ch%d", (int(i)*7919+w)%channels)
						if mode == "coalesced" {
							r.Add(app, ch, 1)
							continue
						}
						if err := applyOne(ctx, r, app, ch, 1); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := r.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			trips := rt.Count() - before
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "changes/s")
			b.ReportMetric(float64(trips)*1000/float64(b.N), "roundtrips/1000changes")
			b.ReportMetric((redisCPU(b, rdb)-cpuBefore)*1e6/float64(b.N)*1000, "redis-cpu-us/1000changes")
			calls, usec := evalshaStats(b, rdb)
			b.ReportMetric((usec-usecBefore)/(calls-callsBefore), "apply-usec/call")
			// The result must be exact whichever way it was written.
			var sum int64
			all, err := NewStore(rdb, testKeys.ks).Channels(ctx, app, "ch")
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range all {
				sum += n
			}
			if sum != int64(b.N) {
				b.Fatalf("counted %d of %d changes", sum, b.N)
			}
		})
	}
}

// applyOne writes one change to r's contribution as its own atomic unit,
// as r would (r has published the app: the change goes under its epoch).
func applyOne(ctx context.Context, r *Recorder, app, ch string, n int64) error {
	r.mu.Lock()
	epoch := r.apps[app].epoch
	r.mu.Unlock()
	keys, args := r.applyCall(&op{app: app, epoch: epoch, pairs: map[string]int64{channelField(ch): n}})
	res, err := parseResult(applyScript.Run(ctx, r.rdb, keys, args...))
	if err == nil && res.status != statusApplied {
		err = fmt.Errorf("apply returned %d", res.status)
	}
	return err
}

// evalshaStats is Redis's count of EVALSHA calls so far and the
// microseconds they took (INFO commandstats).
func evalshaStats(b *testing.B, rdb *redis.Client) (calls, usec float64) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls = f
			case "usec":
				usec = f
			}
		}
	}
	return calls, usec
}

// redisCPU is the Redis server's CPU seconds so far (user + system).
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
	}
	return sum
}

// BenchmarkReadDuringReap measures one count read (Store.Channel) while a
// dead node's reap is under way: by a Store that remembers the reaps its
// last read found, as httpapi's and the cleaner's do for their lives
// ("remembered"), and by a fresh Store per read ("fresh": every read
// before they remembered, which finds the reap, then runs again declaring
// it). It reports Redis round trips per read.
func BenchmarkReadDuringReap(b *testing.B) {
	srv := redistest.New(b)
	rt := &redisx.RoundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	rdb.AddHook(rt)
	ctx := context.Background()
	loadNode(b, rdb, "app", "live", 100, 10, 100)
	loadNode(b, rdb, "app", "dead", 100, 10, 100)
	store := NewStore(rdb, testKeys.ks)
	if _, ok, _, err := store.startReap(ctx, "app", "dead", 0, "", ""); err != nil || !ok {
		b.Fatal("start the reap: ", ok, err)
	}
	for _, mode := range []string{"remembered", "fresh"} {
		b.Run(mode, func(b *testing.B) {
			before := rt.Count()
			for b.Loop() {
				s := store
				if mode == "fresh" {
					s = NewStore(rdb, testKeys.ks)
				}
				if _, err := s.Channel(ctx, "app", "ch0"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.Count()-before)/float64(b.N), "round-trips/read")
		})
	}
}
