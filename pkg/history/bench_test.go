package history_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/fanout"
)

// BenchmarkHistoryCost measures what a history costs Redis, on one
// redis-server: its CPU per event published (used_cpu_user + used_cpu_sys
// over the run, divided by the events) on a channel without a history
// (PUBLISH) and on one with (the history's script), and the memory one
// event of ~100 bytes of data takes while it is held (used_memory over
// the events held). Run:
//
//	go test -run XXX -bench BenchmarkHistoryCost -benchtime 20000x ./pkg/history/
//
// BenchmarkHistoryLatency is the other side of that cost.
func BenchmarkHistoryCost(b *testing.B) {
	srv := redistest.New(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	bus := fanout.New(rdb, fanout.Options{})
	data := `{"text":"` + strings.Repeat("x", 88) + `"}`
	keep := apps.History{Prefix: "chat-", Events: apps.MaxHistoryEvents, Seconds: apps.MaxHistorySeconds}
	for _, tc := range []struct {
		name string
		keep apps.History
	}{{"without", apps.History{}}, {"with", keep}} {
		b.Run(tc.name, func(b *testing.B) {
			require := func(err error) {
				if err != nil {
					b.Fatal(err)
				}
			}
			require(rdb.FlushAll(ctx).Err())
			cpu0, mem0 := usage(b, rdb)
			n := 0
			for b.Loop() {
				// 100 channels, so held events stay under each one's cap.
				ch := "chat-" + strconv.Itoa(n%100)
				require(bus.Publish(ctx, "bench", fanout.Message{Channel: ch, Event: "message", Data: data, Keep: tc.keep}))
				n++
			}
			cpu1, mem1 := usage(b, rdb)
			b.ReportMetric((cpu1-cpu0)*1e6/float64(n), "redis-cpu-us/event")
			if tc.keep.Events > 0 {
				b.ReportMetric(float64(mem1-mem0)/float64(n), "redis-bytes/event-held")
			}
		})
	}
}

// usage reads Redis's CPU seconds (user + sys) and used_memory.
func usage(b *testing.B, rdb redis.UniversalClient) (float64, int64) {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu", "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	var cpu float64
	var mem int64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case "used_memory":
			mem, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return cpu, mem
}

// BenchmarkHistoryLatency measures an event's time from Publish to its
// delivery by another Bus subscribed to its channel, one event at a time
// (each waits for the last to arrive), on a channel without a history and
// on one with: what the history's script adds to delivery (p50-us, p99-us).
func BenchmarkHistoryLatency(b *testing.B) {
	srv := redistest.New(b)
	rdb := srv.Client(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bus := fanout.New(rdb, fanout.Options{})
	sub := fanout.New(srv.Client(b), fanout.Options{})
	got := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx, func(string, fanout.Message) { got <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	sub.Join("bench", "chat-0")
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := sub.WaitJoined(wctx, "bench", []string{"chat-0"}); err != nil {
		b.Fatal(err)
	}
	data := `{"text":"` + strings.Repeat("x", 88) + `"}`
	keep := apps.History{Prefix: "chat-", Events: 100, Seconds: 60}
	for _, tc := range []struct {
		name string
		keep apps.History
	}{{"without", apps.History{}}, {"with", keep}} {
		b.Run(tc.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := bus.Publish(ctx, "bench", fanout.Message{Channel: "chat-0", Event: "message", Data: data, Keep: tc.keep}); err != nil {
					b.Fatal(err)
				}
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					b.Fatal("no delivery in 10 s")
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-us")
		})
	}
}
