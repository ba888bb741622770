package admission

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/redisx/redistest"
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
