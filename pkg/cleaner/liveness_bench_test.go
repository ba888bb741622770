package cleaner

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/redisx"
)

// fleet is a steady multi-tenant deployment for measuring the liveness
// check: apps apps, each with the same two live nodes (real recorders and
// liveness subscriptions), and a cleaner whose checks the caller drives.
type fleet struct {
	rdb   *redis.Client // the measuring client, not the cleaner's
	a     *App
	rt    *redisx.RoundTrips // the cleaner's round trips
	nodes []*counts.Recorder
}

func newFleet(tb testing.TB, apps int) *fleet {
	tb.Helper()
	srv := redistest.New(tb)
	f := &fleet{rdb: srv.Client(tb), rt: &redisx.RoundTrips{}}
	ctx, cancel := context.WithCancel(context.Background())
	var stops []func()
	tb.Cleanup(func() {
		cancel()
		for _, stop := range stops {
			stop()
		}
	})
	goRun := func(run func(context.Context)) {
		done := make(chan struct{})
		go func() { defer close(done); run(ctx) }()
		stops = append(stops, func() { <-done })
	}
	for i := range 2 {
		id := fmt.Sprintf("node%d", i)
		live := counts.NewNodeLiveness(f.rdb, keyspace.Space{}, id, time.Second, hclog.NewNullLogger())
		goRun(live.Run)
		for deadline := time.Now().Add(10 * time.Second); live.Since().IsZero(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				tb.Fatal("a node's liveness subscription was never confirmed")
			}
		}
		rec := counts.NewRecorder(f.rdb, id, counts.RecorderOptions{Heartbeat: time.Hour, Liveness: live})
		for a := range apps {
			rec.Add(fmt.Sprintf("app%d", a), "room", 1)
		}
		if err := rec.Flush(ctx); err != nil {
			tb.Fatal(err)
		}
		f.nodes = append(f.nodes, rec)
	}
	cfg := config.DefaultCleaner()
	cfg.Redis = srv.URL()
	cfg.LeaseTTL = 0
	cfg.AdminAddr = ""
	// Every node past the grace at every check, so every check reads the
	// subscriptions: the steady state's worst case (at the defaults, a
	// heartbeat every second and a 300 ms grace, 7 checks in 10).
	cfg.LivenessGrace = 0
	a, err := New(Options{Config: cfg, Logger: hclog.NewNullLogger(), Registry: prometheus.NewRegistry()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.rdb.Close() })
	a.rdb.AddHook(f.rt)
	f.a = a
	goRun(a.canary.Run)
	// Until the canary is trusted a check believes no node dead; wait, so
	// the measured checks are the steady state's.
	deadline := time.Now().Add(10 * time.Second)
	for a.canary.Since().IsZero() || time.Since(a.canary.Since()) < livenessTrustAfter {
		if time.Now().After(deadline) {
			tb.Fatal("the cleaner's canary never subscribed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.heartbeat(tb)
	return f
}

// heartbeat refreshes every node's last-seen, as their recorders do every
// heartbeat interval.
func (f *fleet) heartbeat(tb testing.TB) {
	for _, r := range f.nodes {
		if err := r.Heartbeat(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
}

func (f *fleet) check(tb testing.TB) {
	if err := f.a.checkLiveness(context.Background(), func() bool { return true }); err != nil {
		tb.Fatal(err)
	}
}

// redisLoad is what Redis has done so far: CPU seconds (user + system),
// commands run and their microseconds (INFO commandstats), leaving out the
// INFO calls that read it.
type redisLoad struct {
	cpu   float64
	calls int64
	usec  int64
}

func (l redisLoad) sub(o redisLoad) redisLoad {
	return redisLoad{l.cpu - o.cpu, l.calls - o.calls, l.usec - o.usec}
}

func readLoad(tb testing.TB, rdb *redis.Client) redisLoad {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var l redisLoad
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				l.cpu += f
			}
		}
		// cmdstat_evalsha:calls=1,usec=2,usec_per_call=2.00,...
		name, stats, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				l.calls += n
			case "usec":
				l.usec += n
			}
		}
	}
	return l
}

// checksPerHeartbeat: the nodes heartbeat every second and the check runs
// every 100 ms.
const checksPerHeartbeat = 10

// BenchmarkLivenessCheck measures the active cleaner's liveness check in
// the steady state (every node alive, nothing to reap) against the number
// of apps, each with the same two live nodes. The nodes heartbeat every 10
// checks, as at the defaults; their writes are left out of the figures.
// It reports, per check, Redis's CPU (INFO cpu, user + system), the
// commands Redis ran and their time (INFO commandstats) and the cleaner's
// round trips.
//
//	go test -run '^$' -bench BenchmarkLivenessCheck -benchtime 200x ./pkg/cleaner/
func BenchmarkLivenessCheck(b *testing.B) {
	for _, apps := range []int{1, 100, 1000, 10000} {
		f := newFleet(b, apps)
		b.Run(fmt.Sprintf("apps=%d", apps), func(b *testing.B) {
			trips := f.rt.Count()
			b.ResetTimer()
			load := f.measure(b, b.N, b.StopTimer, b.StartTimer)
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(load.cpu*1e6/n, "redis-cpu-us/check")
			b.ReportMetric(float64(load.usec)/n, "redis-cmd-us/check")
			b.ReportMetric(float64(load.calls)/n, "commands/check")
			b.ReportMetric(float64(f.rt.Count()-trips)/n, "roundtrips/check")
		})
	}
}

// measure runs checks liveness checks, the nodes heartbeating every
// checksPerHeartbeat of them, and returns Redis's load of the checks alone;
// pause and resume bracket what is not measured.
func (f *fleet) measure(tb testing.TB, checks int, pause, resume func()) redisLoad {
	var load redisLoad
	for i := 0; i < checks; {
		pause()
		f.heartbeat(tb)
		before := readLoad(tb, f.rdb)
		resume()
		for j := 0; j < checksPerHeartbeat && i < checks; j, i = j+1, i+1 {
			f.check(tb)
		}
		pause()
		load = load.add(readLoad(tb, f.rdb).sub(before))
		resume()
	}
	return load
}

func (l redisLoad) add(o redisLoad) redisLoad {
	return redisLoad{l.cpu + o.cpu, l.calls + o.calls, l.usec + o.usec}
}
