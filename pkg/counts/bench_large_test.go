package counts

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
)

// BenchmarkLargeApp writes one app of HC_BENCH_LARGE_APP connections
// (make bench: 1,000,000) through the real scripts, as wsnodes of 50,000
// sockets each would, then runs what grows with an app's size, once each:
// every node's first flush (a whole app republished, as after Redis lost
// its data), a full audit, a full listing, the start of a paging walk, the
// reap of one 50,000-socket node and that node's republish, and the reap of
// a node holding 300,000 subscriptions of the app, one per channel of its
// own (every one vacated). Each reports
// Redis's own view (SLOWLOG at 50 µs, INFO commandstats): the longest
// command, the p99 of the scripts logged, how many scripts ran, the
// commands that took most of Redis's time (a script's own commands count
// under their names, so a reap's time splits by command) and the Redis
// server's CPU time (INFO cpu), and for a reap that time per field
// reaped; and how long a heartbeat of another node of the app, sent every
// 10 ms on a connection of its own, waited meanwhile (p99, max).
// Skipped without the variable: it needs about 1 GB of Redis memory and
// several minutes. The app is written whichever sub-benchmarks -bench
// selects, so -bench 'LargeApp/reap' measures the reaps alone.
//
// The mix per connection is docs/SCALING.md's: a private channel of its
// own, one of 10,000 public channels of 100 subscribers each, and for one
// connection in ten a presence room of 20 members (5,000 rooms), every
// channel's subscribers spread over every node.
func BenchmarkLargeApp(b *testing.B) {
	conns, _ := strconv.Atoi(os.Getenv("HC_BENCH_LARGE_APP"))
	if conns <= 0 {
		b.Skip("set HC_BENCH_LARGE_APP to the app's connections (make bench: 1000000)")
	}
	const perNode = 50000
	nodes := max(conns/perNode, 1)
	ctx := context.Background()
	srv := redistest.New(b)
	// redis-server gets its own half of the CPUs, at the highest priority:
	// what is measured is its time, not its wait for a core this process
	// (the wsnodes) or other work holds.
	if redisCPUs, ours, ok := proctest.SplitCPUs(); ok {
		proctest.Pin(b, srv.PID(), redisCPUs)
		proctest.Favor(b, srv.PID())
		proctest.Pin(b, os.Getpid(), ours)
		defer proctest.Pin(b, os.Getpid(), append(slices.Clone(redisCPUs), ours...))
	}
	opts := *srv.Client(b).Options()
	opts.ReadTimeout = time.Minute
	rdb := redis.NewClient(&opts)
	b.Cleanup(func() { _ = rdb.Close() })
	m := newScriptMeter(b, rdb, &opts)

	fill := func(r *Recorder, node int) {
		for i := range min(perNode, conns) {
			g := node*perNode + i
			r.AddConnections("app", 1)
			r.Add("app", fmt.Sprintf("private-user-%07d", g), 1)
			r.Add("app", fmt.Sprintf("public-%05d", g%10000), 1)
			if g%10 == 0 {
				room := fmt.Sprintf("presence-room-%04d", (g/10)%5000)
				r.Add("app", room, 1)
				r.AddMember("app", room, strconv.Itoa(g), memberInfo, 1)
			}
		}
	}
	newNode := func(node int) *Recorder {
		r := NewRecorder(rdb, fmt.Sprintf("node-%02d", node), RecorderOptions{Heartbeat: time.Hour, Logger: hclog.NewNullLogger()})
		fill(r, node)
		return r
	}
	recs := make([]*Recorder, nodes)
	for i := range recs {
		recs[i] = newNode(i)
	}
	store := NewStore(rdb, testKeys.ks)
	listings := NewListings(rdb, ListingOptions{CacheTTL: -1})

	republishApp := func() int {
		var wg sync.WaitGroup
		for _, r := range recs {
			wg.Go(func() { require.NoError(b, r.Flush(ctx)) })
		}
		wg.Wait()
		return 0
	}
	if !m.run(b, "republish-app", republishApp) {
		republishApp() // what the others measure needs the app written
	}
	m.run(b, "audit", func() int {
		d, err := store.Audit(ctx, "app")
		require.NoError(b, err)
		require.False(b, d.Found(), "drift in a freshly written app")
		return 0
	})
	m.run(b, "listing", func() int {
		ls, err := listings.ReadListing(ctx, "app", ListingQuery{})
		require.NoError(b, err)
		require.Greater(b, len(ls.Channels), conns)
		return 0
	})
	m.run(b, "walk-start", func() int {
		pg, _, err := listings.Page(ctx, "app", "", "", 100)
		require.NoError(b, err)
		require.NotEmpty(b, pg.Next)
		return 0
	})
	reap := func(node string) func() int {
		return func() int {
			ok, reaped, err := store.ReapNode(ctx, "app", node, 0)
			require.NoError(b, err)
			require.True(b, ok)
			require.Positive(b, reaped.Fields)
			return reaped.Fields
		}
	}
	m.run(b, "reap-50k-node", reap("node-00"))
	back := newNode(0)
	m.run(b, "republish-50k-node", func() int { require.NoError(b, back.Flush(ctx)); return 0 })

	if subSelected("reap-300k-subscriptions") {
		big := NewRecorder(rdb, "big", RecorderOptions{Heartbeat: time.Hour, Logger: hclog.NewNullLogger()})
		for i := range 300000 {
			big.Add("app", fmt.Sprintf("big-%06d", i), 1)
		}
		require.NoError(b, big.Flush(ctx))
		m.run(b, "reap-300k-subscriptions", reap("big"))
	}
}

// memberInfo is a presence member's user_info of a typical size.
var memberInfo = []byte(`{"name":"User 1234567"}`)

// scriptMeter measures one operation with Redis's own accounting while
// another node of the app heartbeats.
type scriptMeter struct {
	rdb *redis.Client
	hb  *Recorder
}

func newScriptMeter(tb testing.TB, rdb *redis.Client, opts *redis.Options) *scriptMeter {
	ctx := context.Background()
	// 50 µs, not 0: logging every command would slow what is measured.
	require.NoError(tb, rdb.ConfigSet(ctx, "slowlog-log-slower-than", "50").Err())
	require.NoError(tb, rdb.ConfigSet(ctx, "slowlog-max-len", "1000000").Err())
	hbClient := redis.NewClient(opts)
	tb.Cleanup(func() { _ = hbClient.Close() })
	hb := NewRecorder(hbClient, "heartbeat", RecorderOptions{Heartbeat: time.Hour, Logger: hclog.NewNullLogger()})
	hb.Add("app", "hb", 1)
	require.NoError(tb, hb.Flush(ctx))
	return &scriptMeter{rdb: rdb, hb: hb}
}

// measurement is one operation seen from Redis.
type measurement struct {
	longest, scriptP99, redisTime, wall, hbP99, hbMax time.Duration
	longestCmd                                        string
	units                                             int64
	// costliest: the commands that took most of Redis's time, by INFO
	// commandstats (a script's commands count under their own names too).
	costliest string
}

func (m *scriptMeter) measure(tb testing.TB, f func()) measurement {
	ctx := context.Background()
	require.NoError(tb, m.rdb.SlowLogReset(ctx).Err())
	require.NoError(tb, m.rdb.ConfigResetStat(ctx).Err())
	cpu0 := m.cpu(tb)
	stop, beats := make(chan struct{}), make(chan []time.Duration)
	go func() {
		var lat []time.Duration
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				beats <- lat
				return
			case <-t.C:
			}
			t0 := time.Now()
			if err := m.hb.Heartbeat(ctx); err == nil {
				lat = append(lat, time.Since(t0))
			}
		}
	}()
	start := time.Now()
	f()
	out := measurement{wall: time.Since(start)}
	close(stop)
	lat := <-beats
	out.hbP99, out.hbMax = quantile(lat, 0.99), quantile(lat, 1)

	logs, err := m.rdb.SlowLogGet(ctx, -1).Result()
	require.NoError(tb, err)
	var scripts []time.Duration
	for _, l := range logs {
		name := strings.ToLower(fmt.Sprint(l.Args[0]))
		if name == "slowlog" || name == "config" {
			continue
		}
		if l.Duration > out.longest {
			args := l.Args[:min(len(l.Args), 8)]
			out.longest, out.longestCmd = l.Duration, fmt.Sprintf("%q of %d arguments", args, len(l.Args))
		}
		if name == "evalsha" || name == "eval" {
			scripts = append(scripts, l.Duration)
		}
	}
	out.scriptP99 = quantile(scripts, 0.99)

	// Scripts run by EVALSHA or EVAL; commands they call are counted
	// under their own names, so only these two are the units.
	stats, err := m.rdb.Info(ctx, "commandstats").Result()
	require.NoError(tb, err)
	type cost struct {
		name        string
		calls, usec int64
	}
	var costs []cost
	for _, line := range strings.Split(stats, "\r\n") {
		stat, ok := strings.CutPrefix(line, "cmdstat_")
		name, rest, _ := strings.Cut(stat, ":")
		if !ok {
			continue
		}
		c := cost{name: name}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				c.calls = x
			case "usec":
				c.usec = x
			}
		}
		if name == "eval" || name == "evalsha" {
			out.units += c.calls
		}
		costs = append(costs, c)
	}
	slices.SortFunc(costs, func(a, b cost) int { return cmp.Compare(b.usec, a.usec) })
	var top []string
	for _, c := range costs[:min(len(costs), 6)] {
		top = append(top, fmt.Sprintf("%s %d calls %v", c.name, c.calls, time.Duration(c.usec)*time.Microsecond))
	}
	out.costliest = strings.Join(top, ", ")
	out.redisTime = m.cpu(tb) - cpu0
	return out
}

// run measures f as sub-benchmark name and reports what measure saw; f
// returns the contribution fields it reaped, if it reaps (else 0). It
// reports whether -bench selected the sub-benchmark.
func (m *scriptMeter) run(b *testing.B, name string, f func() int) (ran bool) {
	b.Run(name, func(b *testing.B) {
		ran = true
		var r measurement
		var fields int
		for range b.N {
			r = m.measure(b, func() { fields = f() })
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(ms(r.longest), "longest-cmd-ms")
		b.ReportMetric(ms(r.scriptP99), "script-p99-ms")
		b.ReportMetric(float64(r.units), "scripts")
		b.ReportMetric(r.redisTime.Seconds(), "redis-cpu-s")
		b.ReportMetric(r.wall.Seconds(), "wall-s")
		b.ReportMetric(ms(r.hbP99), "heartbeat-p99-ms")
		b.ReportMetric(ms(r.hbMax), "heartbeat-max-ms")
		perField := ""
		if fields > 0 {
			us := float64(r.redisTime) / float64(time.Microsecond) / float64(fields)
			b.ReportMetric(float64(fields), "fields")
			b.ReportMetric(us, "redis-cpu-us/field")
			perField = fmt.Sprintf(" (%d fields, %.2f µs a field)", fields, us)
		}
		b.Logf("%s: longest command %v (%s), scripts p99 %v, %d scripts, %v of Redis CPU%s, wall %v; heartbeats p99 %v, max %v; Redis's time by command: %s",
			name, r.longest, r.longestCmd, r.scriptP99, r.units, r.redisTime, perField, r.wall, r.hbP99, r.hbMax, r.costliest)
	})
	return ran
}

// subSelected reports whether -bench may select a sub-benchmark name, so
// its setup is skipped when it cannot run.
func subSelected(name string) bool {
	pat := flag.Lookup("test.bench").Value.String()
	parts := strings.Split(pat, "/")
	if len(parts) < 2 {
		return true
	}
	re, err := regexp.Compile(parts[1])
	return err != nil || re.MatchString(name)
}

// cpu is the Redis server's CPU time so far (INFO cpu, user + system).
func (m *scriptMeter) cpu(tb testing.TB) time.Duration {
	info, err := m.rdb.Info(context.Background(), "cpu").Result()
	require.NoError(tb, err)
	var sec float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			x, _ := strconv.ParseFloat(v, 64)
			sec += x
		}
	}
	return time.Duration(sec * float64(time.Second))
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1))]
}
