package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
)

// countingHook counts the round trips a client makes (a pipeline is one).
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkCheck measures admission checks (POST .../admission: the
// check-in of a waiter) against one redis-server holding a channel of
// capacity 30 that is full, with 10,000 waiters, from 32 concurrent
// callers: checks/s and Redis round trips per check (the targets:
// at least 20,000/s, and 1). Run it with:
//
//	go test -run '^$' -bench Check ./pkg/admission/
func BenchmarkCheck(b *testing.B) {
	const waiters, capacity = 10000, 30
	rdb := redistest.New(b).Client(b)
	ctx := context.Background()
	g := New(rdb, keyspace.Space{})
	r := Rule{Capacity: capacity, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
	for i := range capacity + waiters {
		if _, err := g.Check(ctx, "app", "presence-room", fmt.Sprint("u", i), r); err != nil {
			b.Fatal(err)
		}
	}
	hook := &countingHook{}
	rdb.AddHook(hook)
	var next atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			u := fmt.Sprint("u", capacity+int(next.Add(1))%waiters)
			res, err := g.Check(ctx, "app", "presence-room", u, r)
			if err != nil {
				b.Error(err)
				return
			}
			if res.Status != Waiting {
				b.Errorf("%s: %v", u, res.Status)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
	b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/check")
}

// BenchmarkJoinFull measures presence subscribes refused by the member
// limit alone (no capacity), from 16 concurrent callers, on a channel of
// 100 seats held by members (a full channel as it mostly is) or by joins
// not recorded as members yet (the most a refusal reads): joins/s, Redis
// round trips per join and Redis's time per join. Run it with:
//
//	go test -run '^$' -bench JoinFull ./pkg/admission/
func BenchmarkJoinFull(b *testing.B) {
	for _, held := range []bool{false, true} {
		name := "members"
		if held {
			name = "held"
		}
		b.Run(name, func(b *testing.B) { benchJoinFull(b, held) })
	}
}

func benchJoinFull(b *testing.B, held bool) {
	const seats = 100
	rdb := redistest.New(b).Client(b)
	ctx := context.Background()
	g := New(rdb, keyspace.Space{})
	complete(b, rdb, "app")
	r := Rule{Members: seats, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
	for i := range seats {
		u := fmt.Sprint("u", i)
		if !held {
			// As counts records a member (this test only writes the hash).
			if err := rdb.HSet(ctx, keys{}.channel("app", "presence-room").Members, u, 1).Err(); err != nil {
				b.Fatal(err)
			}
			continue
		}
		if ok, _, _, _, err := g.Join(ctx, "app", "presence-room", u, r); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	hook := &countingHook{}
	rdb.AddHook(hook)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _, _, _, err := g.Join(ctx, "app", "presence-room", fmt.Sprint("x", next.Add(1)), r)
			if !errors.Is(err, ErrFull) {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "joins/s")
	b.ReportMetric(float64(hook.n.Load())/float64(b.N), "roundtrips/join")
	// Redis's own time per script call, which the machine's load does not
	// blur as much as the round trip.
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					us, _ := strconv.ParseFloat(v, 64)
					b.ReportMetric(us, "redis-us/join")
				}
			}
		}
	}
}
