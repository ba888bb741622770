package fanout

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/internal/redistest"
)

// BenchmarkPublishDeliver measures publish-to-deliver latency on one
// channel between two Buses (two nodes) on a single Redis: one publishes,
// back to back, and the other delivers. Each message carries its publish
// start time; p50 and p99 are reported in milliseconds.
func BenchmarkPublishDeliver(b *testing.B) {
	srv := redistest.New(b)
	pub := New(srv.Client(b), Options{})
	sub := New(srv.Client(b), Options{Logger: hclog.NewNullLogger()})

	lat := make(chan time.Duration, 1<<16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sub.Run(ctx, func(_ string, m Message) {
			if m.Event != "bench" {
				return
			}
			ns, _ := strconv.ParseInt(m.Data, 10, 64)
			lat <- time.Since(time.Unix(0, ns))
		})
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	sub.Join("app-1", "bench")
	// Publishes before the subscription reaches Redis would be lost.
	deadline := time.Now().Add(wait)
	for numSub(b, srv.Client(b), "app-1", "bench") != 1 {
		if time.Now().After(deadline) {
			b.Fatal("subscription not established")
		}
		time.Sleep(tick)
	}

	var all []time.Duration
	collect := func(want int) {
		t := time.NewTimer(wait)
		defer t.Stop()
		for len(all) < want {
			select {
			case d := <-lat:
				all = append(all, d)
			case <-t.C:
				b.Fatalf("delivered %d of %d", len(all), want)
			}
		}
	}
	sent := 0
	for b.Loop() {
		m := Message{Channel: "bench", Event: "bench", Data: strconv.FormatInt(time.Now().UnixNano(), 10)}
		if err := pub.Publish(ctx, "app-1", m); err != nil {
			b.Fatal(err)
		}
		sent++
		// Drain as we go so the channel never fills and stalls delivery.
		for len(lat) > 0 {
			all = append(all, <-lat)
		}
	}
	collect(sent)
	b.StopTimer()
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
