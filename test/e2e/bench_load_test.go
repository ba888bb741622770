package e2e

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/load"
)

// BenchmarkLoad runs load scenarios with the load tool (pkg/load, as
// cmd/hcload does) against real processes, the tool on the same cores:
//   - storm: three rounds and their median (by rate) of 15,000 sockets
//     from 30 source addresses into one wsnode as fast
//     as 512 concurrent dials go: sockets accepted and subscribed per
//     second, the time until the HTTP API counts them all, and the CPU per
//     socket of the wsnode and of the tool (this process) during the ramp.
//   - delivery/subs=N: N sockets on one channel over two wsnodes, 5 events a
//     second for 4 s through the HTTP API: publish-to-delivery p50/p99, at
//     each decade from 1 to 10,000 subscribers (about 6 s each).
//
// With HC_BENCH_PLOTS set, delivery latency against subscribers is
// plotted there, both axes on a log scale so p50 and p99 read at every
// size. Run it with (-bench 'Load/delivery' for the curve alone):
//
//	go test -run '^$' -bench Load -benchtime 1x ./test/e2e/
func BenchmarkLoad(b *testing.B) {
	n := proctest.RaiseFileLimit(b, 15000)
	rounds(b, "storm", func(b *testing.B) load.Summary {
		srv := redistest.New(b)
		ws := startWSNode(b, "ws-storm", "--redis", srv.URL())
		api := startHTTPAPIs(b, 1, "--redis", srv.URL())[0]
		waitReady(b, ws.p, ws.admin)
		return runLoad(b, load.Config{WS: []string{ws.addr}, API: api.addr, Admin: []string{ws.admin},
			Sockets: n, SourceIPs: 30, Concurrency: 512, ProbeEvery: 100})
	}, func(x, y load.Summary) int { return cmp.Compare(x.AcceptedPerSecond, y.AcceptedPerSecond) }, reportStorm)

	var p50, p99 series
	for _, subs := range []int{1, 10, 100, 1000, 10000} {
		b.Run("delivery/subs="+strconv.Itoa(subs), func(b *testing.B) {
			proctest.RaiseFileLimit(b, subs)
			srv := redistest.New(b)
			a, c := startWSNode(b, "ws-a", "--redis", srv.URL()), startWSNode(b, "ws-b", "--redis", srv.URL())
			api := startHTTPAPIs(b, 1, "--redis", srv.URL())[0]
			waitReady(b, a.p, a.admin)
			waitReady(b, c.p, c.admin)
			sum := runLoad(b, load.Config{WS: []string{a.addr, c.addr}, API: api.addr, Sockets: subs, HotShare: 1,
				SourceIPs: 10, PublishRate: 5, Hold: 4 * time.Second, ProbeEvery: -1})
			if sum.Delivery.N < int(sum.Published)*subs*9/10 {
				b.Fatalf("%d deliveries for %d events to %d subscribers", sum.Delivery.N, sum.Published, subs)
			}
			b.ReportMetric(sum.Delivery.P50, "p50-ms")
			b.ReportMetric(sum.Delivery.P99, "p99-ms")
			b.ReportMetric(float64(subs), "subscribers")
			p50.xs, p50.ys = append(p50.xs, float64(subs)), append(p50.ys, sum.Delivery.P50)
			p99.xs, p99.ys = append(p99.xs, float64(subs)), append(p99.ys, sum.Delivery.P99)
		})
	}
	if dir := plotDir(); dir != "" && len(p99.xs) > 1 {
		p50.name, p99.name = "p50", "p99"
		if err := linePlot(filepath.Join(dir, "delivery-latency.png"), "Publish-to-delivery latency, one channel on two wsnodes (ms)",
			"subscribers (log scale)", "ms (log scale)", plotScale{logX: true, logY: true}, p50, p99); err != nil {
			b.Error(err)
		}
	}
}

func reportStorm(b *testing.B, sum load.Summary) {
	b.ReportMetric(sum.AcceptedPerSecond, "accepted/s")
	b.ReportMetric(sum.CountedAllSeconds, "s-to-all-counted")
	b.ReportMetric(sum.RampCPUPerSocketMs*1000, "wsnode-cpu-us/socket")
	b.ReportMetric(sum.ToolCPUPerSocketMs*1000, "load-tool-cpu-us/socket")
	b.ReportMetric(sum.Connect.P99, "connect-p99-ms")
	b.ReportMetric(sum.Counted.P99, "counted-p99-ms")
}

// runLoad runs one scenario of the e2e app, bounded by 3 minutes.
func runLoad(b *testing.B, cfg load.Config) load.Summary {
	b.Helper()
	cfg.AppID, cfg.Key, cfg.Secret = e2eAppID, e2eAppKey, e2eAppSecret
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b.ResetTimer()
	sum, err := load.Run(ctx, cfg)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if e := sum.ConnectErrors + sum.SubscribeErrors; e > 0 {
		b.Fatalf("%d sockets failed: %+v", e, sum)
	}
	b.Logf("%s", fmt.Sprintf("%+v", sum))
	return sum
}
