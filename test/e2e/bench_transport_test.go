package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/load"
	"github.com/headcount/headcount/pkg/wsclient"
)

// transportKinds are the transports BenchmarkTransport compares, by
// --transport value, as startCluster's kinds.
var transportKinds = map[string]string{
	config.TransportEventLoop: headcountServer,
	config.TransportGoroutine: headcountGoroutine,
}

// BenchmarkTransport's counted measure: sockets connected at a steady
// rate below what saturates this VM's two cores.
const countedSockets, countedRate = 4000, 2000

// frameWorkers is how many frames BenchmarkTransport keeps in flight: each
// worker owns every frameWorkers-th socket and sends on them in turn, one
// frame at a time (a closed loop).
const frameWorkers = 64

// BenchmarkTransport measures what wsnode's two transports cost per frame
// and in the worst cases of the event loop, each measure on one fresh
// wsnode (with its cleaners, httpapi and redis-server) per transport, in
// the same run, HC_TRANSPORT_ROUNDS (3) rounds alternating which goes
// first: Transport/<measure>/<transport> is each transport's median over
// the rounds, Transport/<measure>/ratio each unit's eventloop / goroutine
// of the medians. HC_TRANSPORTS (a comma list: eventloop,goroutine)
// narrows it to some.
//   - frame-cpu-ping: HC_TRANSPORT_SOCKETS (1,000) sockets send
//     HC_TRANSPORT_FRAMES (100,000) pusher:ping frames in all, frameWorkers
//     at a time, each waiting for its pusher:pong: the node's CPU time
//     (utime+stime, /proc) per 1,000 frames and the round trip's p50/p99.
//     Ping touches nothing but the transport and the handler's dispatch.
//   - frame-cpu-subscribe: the same with pusher:subscribe (waiting for
//     subscription_succeeded) and pusher:unsubscribe pairs on 100 public
//     channels, the typical frame (it changes counts); the round trip is
//     the subscribe's. A last ping on every socket makes sure its last
//     unsubscribe was handled inside the measured CPU.
//   - counted: countedSockets sockets connect and subscribe at countedRate a
//     second (the load tool, 10 source addresses); every 20th measures
//     subscribe-to-counted (its subscribe until the HTTP API counts it):
//     p50/p99 of that and of the connect, and the node's CPU per socket
//     during the ramp.
//   - blocked-handler: 100 sockets subscribe to cache channels while
//     redis-server is paused (CLIENT PAUSE 2000 ALL), so their handlers
//     wait on Redis (the cache read) for the pause; 1,000 other sockets
//     ping meanwhile as in frame-cpu-ping. Their round trip's p50/p99
//     during the pause against the same before it, and how long the
//     blocked handlers took to answer (the pause, if they really waited).
//   - slow-reader: 1,000 subscribers of one channel get 10 events a
//     second carrying their send time, and one socket subscribed to
//     another channel gets 8 KiB events 100 times a second and reads them,
//     for 5 s (the baseline); then a socket that never reads subscribes to
//     that channel too. The subscribers' publish-to-read p50/p99 while it
//     is stuck against the baseline; the node's peak RSS and live Go heap
//     (after a collection, every 500 ms) growth while it is stuck against
//     the same in the baseline; how long the node took to cut it and whether
//     the write timeout (10 s; errors_total's write_timeout) did rather
//     than its full send queue (slow_consumers_total). The kernel takes
//     the first few MiB (the node's send buffer grows to tcp_wmem's
//     maximum, 4 MiB by default, while the client's window is shut), so
//     the rate is high enough to fill it in seconds.
//
// The sockets and the load are this process's, on the same cores as the
// node: ratios within one run say more than the absolute figures. Run it
// alone:
//
//	go test -run '^$' -bench Transport -benchtime 1x -timeout 20m ./test/e2e/
func BenchmarkTransport(b *testing.B) {
	sockets := envInt("HC_TRANSPORT_SOCKETS", 1000)
	frames := envInt("HC_TRANSPORT_FRAMES", 100000)
	proctest.RaiseFileLimit(b, sockets+300)
	ping := wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)

	byTransport(b, "frame-cpu-ping", func(b *testing.B, c cluster) []peerMetric {
		conns := dialConns(b, c.ws[0], sockets)
		return frameCPU(b, c, frames, 1, func(_ int, c *wsclient.Conn) error {
			return roundTrip(c, ping, "pusher:pong")
		}, nil, conns)
	})

	byTransport(b, "frame-cpu-subscribe", func(b *testing.B, c cluster) []peerMetric {
		conns := dialConns(b, c.ws[0], sockets)
		sub, unsub := make([][]byte, 100), make([][]byte, 100)
		for i := range sub {
			ch := `"tx-` + strconv.Itoa(i) + `"`
			sub[i] = wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":` + ch + `}}`)
			unsub[i] = wsclient.TextFrame(`{"event":"pusher:unsubscribe","data":{"channel":` + ch + `}}`)
		}
		return frameCPU(b, c, frames, 2, func(i int, c *wsclient.Conn) error {
			if err := roundTrip(c, sub[i%100], "subscription_succeeded"); err != nil {
				return err
			}
			_, err := c.Write(unsub[i%100])
			return err
		}, func(c *wsclient.Conn) error { return roundTrip(c, ping, "pusher:pong") }, conns)
	})

	byTransport(b, "counted", func(b *testing.B, c cluster) []peerMetric {
		sum := runLoad(b, load.Config{WS: c.ws, API: c.api, PIDs: c.pids(), Sockets: countedSockets,
			ConnectRate: countedRate, SourceIPs: 10, ProbeEvery: 20, Hold: time.Second})
		return []peerMetric{
			{"counted-p50-ms", sum.Counted.P50}, {"counted-p99-ms", sum.Counted.P99},
			{"connect-p50-ms", sum.Connect.P50}, {"connect-p99-ms", sum.Connect.P99},
			{"node-cpu-us/socket", sum.RampCPUPerSocketMs * 1000},
		}
	})

	byTransport(b, "blocked-handler", func(b *testing.B, c cluster) []peerMetric {
		const blocked, pause = 100, 2 * time.Second
		pingers := dialConns(b, c.ws[0], sockets)
		blockers := dialConns(b, c.ws[0], blocked)
		pingOp := func(_ int, c *wsclient.Conn) error { return roundTrip(c, ping, "pusher:pong") }
		before, _ := opLoop(pingers, 1<<30, time.Now().Add(pause*9/10), pingOp)
		if err := c.rdb.Do(context.Background(), "CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "ALL").Err(); err != nil {
			b.Fatal(err)
		}
		paused := time.Now()
		var waited latencies
		var wg sync.WaitGroup
		errs := make(chan error, blocked)
		for i, bc := range blockers {
			wg.Go(func() {
				// The subscribe's handler reads the channel's cached event
				// from Redis before it answers with it or pusher:cache_miss.
				err := roundTrip(bc, wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":"cache-block-`+strconv.Itoa(i)+`"}}`), "pusher:cache_miss")
				if err != nil {
					errs <- err
					return
				}
				waited.add([]time.Duration{time.Since(paused)})
			})
		}
		during, err := opLoop(pingers, 1<<30, paused.Add(pause*9/10), pingOp)
		if err != nil {
			b.Fatalf("pings during the pause: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("a blocked handler: %v", err)
		}
		return []peerMetric{
			{"before-p50-ms", ms(pct(before, 0.50))}, {"before-p99-ms", ms(pct(before, 0.99))},
			{"paused-p50-ms", ms(pct(during, 0.50))}, {"paused-p99-ms", ms(pct(during, 0.99))},
			{"paused-pings", float64(len(during))},
			{"blocked-answer-p50-ms", ms(pct(waited.all, 0.50))},
		}
	})

	byTransport(b, "slow-reader", func(b *testing.B, c cluster) []peerMetric {
		return slowReader(b, c, sockets)
	})
}

// byTransport runs measure on a fresh cluster of one wsnode per
// transport (HC_TRANSPORTS, or both) for HC_TRANSPORT_ROUNDS rounds (3),
// as <measure>/round=N/<transport>, rotating which transport goes first;
// then reports each transport's median per unit as <measure>/<transport>
// and each median's ratio eventloop / goroutine as <measure>/ratio.
func byTransport(b *testing.B, measure string, run func(b *testing.B, c cluster) []peerMetric) {
	transports := []string{config.TransportEventLoop, config.TransportGoroutine}
	if v := os.Getenv("HC_TRANSPORTS"); v != "" {
		transports = strings.Split(v, ",")
	}
	rounds := envInt("HC_TRANSPORT_ROUNDS", 3)
	b.Run(measure, func(b *testing.B) {
		results := map[string][][]peerMetric{}
		for r := range rounds {
			order := append(slices.Clone(transports[r%len(transports):]), transports[:r%len(transports)]...)
			for _, t := range order {
				kind, ok := transportKinds[t]
				if !ok {
					b.Fatalf("HC_TRANSPORTS: unknown transport %q", t)
				}
				b.Run("round="+strconv.Itoa(r+1)+"/"+t, func(b *testing.B) {
					b.StopTimer()
					m := run(b, startCluster(b, kind, 1))
					for _, x := range m {
						b.ReportMetric(x.value, x.unit)
					}
					results[t] = append(results[t], m)
				})
			}
		}
		medians := map[string][]peerMetric{}
		for _, t := range transports {
			rs := results[t]
			if len(rs) != rounds {
				continue // a round failed; it said why
			}
			for i, x := range rs[0] {
				var vs []float64
				for _, r := range rs {
					vs = append(vs, r[i].value)
				}
				slices.Sort(vs)
				medians[t] = append(medians[t], peerMetric{x.unit, vs[len(vs)/2]})
			}
			b.Run(t, func(b *testing.B) {
				for _, x := range medians[t] {
					b.ReportMetric(x.value, x.unit)
				}
			})
		}
		loop, gor := medians[config.TransportEventLoop], medians[config.TransportGoroutine]
		if len(loop) == 0 || len(loop) != len(gor) {
			return
		}
		b.Run("ratio", func(b *testing.B) {
			for i, x := range loop {
				if gor[i].value != 0 {
					b.ReportMetric(x.value/gor[i].value, x.unit)
				}
			}
		})
	})
}

// dialConns opens n sockets to addr, each past pusher:connection_established,
// 16 at a time; they close when b ends.
func dialConns(b *testing.B, addr string, n int) []*wsclient.Conn {
	b.Helper()
	conns := make([]*wsclient.Conn, n)
	b.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	next := make(chan int)
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range next {
				c, err := wsclient.Dial(addr, "/app/"+e2eAppKey+"?protocol=7")
				if err == nil {
					conns[i] = c
					_, err = c.Read(10 * time.Second)
				}
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Errorf("socket %d: %w", i, err))
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return conns
}

// roundTrip writes frame to c and reads frames until one holds want.
func roundTrip(c *wsclient.Conn, frame []byte, want string) error {
	if _, err := c.Write(frame); err != nil {
		return err
	}
	for {
		got, err := c.Read(10 * time.Second)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", want, err)
		}
		if strings.Contains(got, want) {
			return nil
		}
	}
}

// opLoop runs op ops times in all (or until deadline) over conns from
// frameWorkers workers, worker w on sockets w, w+frameWorkers, ... in
// turn, and returns each op's duration. op's i is the op's number on its
// socket's worker.
func opLoop(conns []*wsclient.Conn, ops int, deadline time.Time, op func(i int, c *wsclient.Conn) error) ([]time.Duration, error) {
	var lat latencies
	var failed atomic.Value
	var wg sync.WaitGroup
	workers := min(frameWorkers, len(conns))
	for w := range workers {
		wg.Go(func() {
			mine := (ops + workers - 1 - w) / workers
			own := (len(conns) - w + workers - 1) / workers // sockets w, w+workers, ...
			d := make([]time.Duration, 0, min(mine, 1<<16))
			defer func() { lat.add(d) }()
			for i := range mine {
				if time.Now().After(deadline) {
					return
				}
				c := conns[w+i%own*workers]
				t := time.Now()
				if err := op(i, c); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				d = append(d, time.Since(t))
			}
		})
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return lat.all, err
}

// frameCPU runs ops of perOp frames each (frames in all) over conns, then
// last on every socket if not nil (its frames counted too), and reports
// the node's CPU time per 1,000 frames, the ops' p50/p99 and frames/s.
func frameCPU(b *testing.B, c cluster, frames, perOp int, op func(i int, c *wsclient.Conn) error, last func(c *wsclient.Conn) error, conns []*wsclient.Conn) []peerMetric {
	b.Helper()
	pid := c.nodes[0].cmd.Process.Pid
	cpu0, start := procCPU(b, pid), time.Now()
	lat, err := opLoop(conns, frames/perOp, time.Now().Add(5*time.Minute), op)
	if err != nil {
		b.Fatal(err)
	}
	sent := len(lat) * perOp
	if last != nil {
		for _, c := range conns {
			if err := last(c); err != nil {
				b.Fatal(err)
			}
		}
		sent += len(conns)
	}
	took, cpu := time.Since(start), procCPU(b, pid)-cpu0
	return []peerMetric{
		{"node-cpu-ms/1000frames", cpu.Seconds() * 1000 * 1000 / float64(sent)},
		{"rtt-p50-ms", ms(pct(lat, 0.50))}, {"rtt-p99-ms", ms(pct(lat, 0.99))},
		{"frames/s", float64(sent) / took.Seconds()},
	}
}

// procCPU is a process's CPU time so far, user and system (/proc/PID/stat,
// in USER_HZ ticks of 10 ms).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	// After the command name (in parentheses, may hold spaces): state,
	// then utime and stime as the 12th and 13th fields.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// slowReader is BenchmarkTransport's slow-reader measure (its comment).
func slowReader(b *testing.B, c cluster, subscribers int) []peerMetric {
	b.Helper()
	const (
		normalRate, bigRate = 10, 100
		bigSize             = 8 << 10
		baseline            = 5 * time.Second
		giveUp              = 30 * time.Second
	)
	subscribe := func(c *wsclient.Conn, ch string) {
		if err := roundTrip(c, wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":"`+ch+`"}}`), "subscription_succeeded"); err != nil {
			b.Fatal(err)
		}
	}
	// The subscribers read every frame and record each event's age; phase
	// says which of the two windows it goes to (0: neither).
	var phase atomic.Int32
	var lat [3]latencies
	normal := dialConns(b, c.ws[0], subscribers)
	var readers sync.WaitGroup
	defer readers.Wait()
	for _, s := range normal {
		subscribe(s, "slow-normal")
		readers.Go(func() {
			var mine [3][]time.Duration
			defer func() {
				for p := 1; p < 3; p++ {
					lat[p].add(mine[p])
				}
			}()
			_ = s.SetReadDeadline(time.Time{})
			for {
				got, err := s.Read(0)
				if err != nil {
					return // closed at the end
				}
				at, ok := sentAt(got)
				if p := phase.Load(); ok && p > 0 {
					mine[p] = append(mine[p], time.Since(at))
				}
			}
		})
	}
	big := dialConns(b, c.ws[0], 2)
	reader, stuck := big[0], big[1]
	subscribe(reader, "slow-big")
	_ = reader.SetReadDeadline(time.Time{})
	readers.Go(func() { _, _ = io.Copy(io.Discard, reader.Conn) })

	ctx, cancel := context.WithCancel(context.Background())
	var pubs sync.WaitGroup
	defer pubs.Wait()
	defer cancel()
	pad := strings.Repeat("x", bigSize)
	pubs.Go(func() {
		publishEvery(ctx, b, c.api, "slow-normal", normalRate, func() string { return strconv.FormatInt(time.Now().UnixNano(), 10) })
	})
	pubs.Go(func() { publishEvery(ctx, b, c.api, "slow-big", bigRate, func() string { return pad }) })

	admin := c.admin[0]
	pid := c.nodes[0].cmd.Process.Pid
	// peak samples the node's RSS every 100 ms and its live Go heap (in
	// use after a collection) every 500 ms until done, and returns their
	// highest growth from the first sample.
	peak := func(done func() bool) (rss, heap float64) {
		rss0, heap0 := proctest.RSS(b, pid), readGoMemory(admin).heap
		for i := 1; !done(); i++ {
			time.Sleep(100 * time.Millisecond)
			rss = max(rss, float64(proctest.RSS(b, pid)-rss0))
			if i%5 == 0 {
				heap = max(heap, readGoMemory(admin).heap-heap0)
			}
		}
		return rss, heap
	}
	cuts := func() (slow, timeout float64) {
		return metricSum(admin, "headcount_wsnode_slow_consumers_total"),
			metricSum(admin, "headcount_wsnode_errors_total", "reason", "write_timeout")
	}
	phase.Store(1) // the baseline window: deliveries and memory measured meanwhile
	baseAt := time.Now()
	baseRSS, baseHeap := peak(func() bool { return time.Since(baseAt) > baseline })
	phase.Store(0)
	slow0, timeout0 := cuts()
	subscribe(stuck, "slow-big") // and never reads again
	stuckAt := time.Now()
	phase.Store(2)
	var slow, timeout float64
	stuckRSS, stuckHeap := peak(func() bool {
		slow, timeout = cuts()
		return slow > slow0 || timeout > timeout0 || time.Since(stuckAt) > giveUp
	})
	cut := time.Since(stuckAt)
	phase.Store(0)
	cancel()
	if slow == slow0 && timeout == timeout0 {
		b.Errorf("the node did not cut the socket that never reads in %v", giveUp)
	}
	// The readers add their latencies when they end, at their socket's close.
	for _, s := range append(normal, reader) {
		_ = s.Close()
	}
	readers.Wait()
	base, during := lat[1].all, lat[2].all
	if len(base) == 0 || len(during) == 0 {
		b.Fatalf("deliveries: %d in the baseline, %d while stuck", len(base), len(during))
	}
	return []peerMetric{
		{"base-p50-ms", ms(pct(base, 0.50))}, {"base-p99-ms", ms(pct(base, 0.99))},
		{"stuck-p50-ms", ms(pct(during, 0.50))}, {"stuck-p99-ms", ms(pct(during, 0.99))},
		{"base-rss-KiB", baseRSS / 1024}, {"base-heap-KiB", baseHeap / 1024},
		{"stuck-rss-KiB", stuckRSS / 1024}, {"stuck-heap-KiB", stuckHeap / 1024},
		{"s-to-cut", cut.Seconds()},
		{"cut-by-write-timeout", timeout - timeout0},
	}
}

// sentAt is the send time an event's data carries (publishEvery's
// timestamps), if the frame is such an event.
func sentAt(frame string) (time.Time, bool) {
	_, rest, ok := strings.Cut(frame, `"data":"`)
	if !ok {
		return time.Time{}, false
	}
	digits, _, _ := strings.Cut(rest, `"`)
	ns, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// publishEvery triggers an event on channel through the HTTP API at api,
// rate times a second, with data(), until ctx ends; a failed trigger
// fails b.
func publishEvery(ctx context.Context, b *testing.B, api, channel string, rate int, data func() string) {
	client := &http.Client{Timeout: 10 * time.Second}
	path := "/apps/" + e2eAppID + "/events"
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		body, _ := json.Marshal(map[string]string{"name": "tx", "channel": channel, "data": data()})
		q := auth.SignRequest(http.MethodPost, path, nil, body, e2eAppKey, e2eAppSecret, time.Now())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+api+path+"?"+q.Encode(), bytes.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				b.Errorf("trigger on %s: %v", channel, err)
			}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Errorf("trigger on %s: %s", channel, resp.Status)
			return
		}
	}
}
