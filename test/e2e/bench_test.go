package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/wsclient"
)

// BenchmarkIdleMemory measures what one idle, subscribed socket costs a
// wsnode: it opens HC_BENCH_SOCKETS (default 100,000) sockets from this
// process (bare blocking descriptors: see idleConns), each subscribed to
// one of 100 public channels, spread over one loopback source address per
// 20,000, waits until Redis counts all of them, and reports per socket the
// wsnode's RSS growth (KiB/conn), the Go heap in use, goroutine stacks and
// the runtime's own memory in it (its /metrics), its goroutines, and the
// kernel's slab memory: both ends of every connection (kernel-both) and
// the node's share (kernel-KiB/conn), which kernelShare measures by
// killing the node at the end and seeing what went with it. The wsnode
// runs with --transport HC_TRANSPORT when that is set, else its default.
// GiB/1Mconns is process and kernel for a million such sockets, the slope
// docs/SCALING.md sizes by. It raises the open-file limit of this
// process, which the wsnode inherits (it logs the wsnode's); where the
// hard limit cannot be raised (no CAP_SYS_RESOURCE) it measures what fits
// under it and says so. Run it alone, as root for the kernel's share:
//
//	go test -run '^$' -bench IdleMemory -benchtime 1x -timeout 20m ./test/e2e/
func BenchmarkIdleMemory(b *testing.B) {
	n := envInt("HC_BENCH_SOCKETS", 100000)
	n = proctest.RaiseFileLimit(b, n)
	srv := redistest.New(b)
	addr, admin := freeAddr(b), freeAddr(b)
	// --max-sockets: where the limit could not be raised, n (and the 100
	// warm-up sockets) is what fits this process, above the default cap the
	// wsnode derives from the same limit.
	args := []string{"--redis", srv.URL(), "--addr", addr, "--admin-addr", admin, "--node-id", "bench",
		"--max-sockets", strconv.Itoa(n + 100), "--log-level", "warn"}
	if t := os.Getenv("HC_TRANSPORT"); t != "" {
		args = append(args, "--transport", t)
	}
	node := start(b, "ws-bench", "wsnode", args...)
	waitReady(b, node, admin)
	if limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", node.cmd.Process.Pid)); err == nil {
		for line := range strings.SplitSeq(string(limits), "\n") {
			if strings.HasPrefix(line, "Max open files") {
				b.Logf("wsnode: %s", strings.Join(strings.Fields(line), " "))
			}
		}
	}
	store := counts.NewStore(srv.Client(b), keyspace.Space{})

	conns := &idleConns{}
	defer conns.close()
	conns.keepAlive(b)
	openIdle(b, addr, 100, conns) // warm the pools and the Redis connections
	waitSubscribed(b, store, conns.len())
	pid := node.cmd.Process.Pid
	base := proctest.SettledRSS(b, pid)
	goroutines := metric(admin, "go_goroutines")
	memBase := readGoMemory(admin)
	slabBase := readSlabs()

	b.ResetTimer()
	start := time.Now()
	// In eight steps, so the plot shows RSS against connections (the
	// settling time between steps is not counted in conns/s).
	var steps series
	var paused time.Duration
	for step := 1; step <= 8; step++ {
		openIdle(b, addr, n*step/8-(conns.len()-100), conns)
		if step < 8 && plotDir() != "" {
			waitSubscribed(b, store, conns.len())
			t := time.Now()
			steps.xs = append(steps.xs, float64(conns.len()-100))
			steps.ys = append(steps.ys, float64(proctest.SettledRSS(b, pid)-base)/(1<<20))
			paused += time.Since(t)
		}
	}
	waitSubscribed(b, store, conns.len())
	opened := time.Since(start) - paused
	b.StopTimer()

	rss := proctest.SettledRSS(b, pid)
	mem := readGoMemory(admin)
	perConn := func(d float64) float64 { return d / 1024 / float64(n) }
	b.ReportMetric(perConn(float64(rss-base)), "KiB/conn")
	b.ReportMetric(perConn(mem.heap-memBase.heap), "heap-KiB/conn")
	b.ReportMetric(perConn(mem.stack-memBase.stack), "stack-KiB/conn")
	b.ReportMetric(perConn(mem.runtime-memBase.runtime), "runtime-KiB/conn")
	b.ReportMetric((metric(admin, "go_goroutines")-goroutines)/float64(n), "goroutines/conn")
	b.ReportMetric(float64(n)/opened.Seconds(), "conns/s")
	b.ReportMetric(float64(n), "conns")
	if dir := plotDir(); dir != "" {
		steps.xs, steps.ys = append(steps.xs, float64(n)), append(steps.ys, float64(rss-base)/(1<<20))
		steps.name = "wsnode RSS growth"
		if err := linePlot(filepath.Join(dir, "idle-memory.png"), "Idle subscribed sockets on one wsnode: RSS growth (MiB)",
			"sockets", "MiB", plotScale{}, steps); err != nil {
			b.Error(err)
		}
	}
	// Last: it kills the node.
	if kernel, both, ok := kernelShare(b, slabBase, settledSlabs(slabBase.total()), n, conns, func() { node.kill(b) }); ok {
		b.ReportMetric(kernel/1024, "kernel-KiB/conn")
		b.ReportMetric(both/1024, "kernel-both-KiB/conn")
		// What a million such sockets take on the node's machine, process
		// and kernel (docs/SCALING.md sizes from it).
		b.ReportMetric((float64(rss-base)+kernel*float64(n))/float64(n)*1e6/(1<<30), "GiB/1Mconns")
	}
}

// plotDir is where benchmarks write their PNG plots (HC_BENCH_PLOTS, set
// by make bench), or "" for none.
func plotDir() string { return os.Getenv("HC_BENCH_PLOTS") }

func waitSubscribed(b testing.TB, store *counts.Store, want int) {
	waitCounted(b, store, "idle-", want)
}

// waitCounted polls until the channels with prefix hold want subscriptions.
func waitCounted(b testing.TB, store *counts.Store, prefix string, want int) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		all, err := store.Channels(context.Background(), "app-id", prefix)
		var sum int64
		for _, c := range all {
			sum += c
		}
		if err == nil && sum == int64(want) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("Redis counts %d of %d sockets (err %v)", sum, want, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkPublishLatency measures publish-to-delivery latency for one
// channel with HC_BENCH_SUBSCRIBERS (default 10,000) subscribers spread over
// two wsnode processes: the benchmark publishes through the same Redis bus
// the HTTP API uses, 20 events one after another, each carrying its send
// time, and every subscriber (a raw socket read by its own goroutine in this
// process) records when it arrived. It reports p50 and p99 over all
// deliveries. Run it alone:
//
//	go test -run '^$' -bench PublishLatency -benchtime 1x ./test/e2e/
func BenchmarkPublishLatency(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("HC_BENCH_SUBSCRIBERS")); err == nil && v > 0 {
		n = v
	}
	n = proctest.RaiseFileLimit(b, n)
	const events = 20
	srv := redistest.New(b)
	rdb := srv.Client(b)
	var nodes, admins []string
	for i := range 2 {
		addr, admin := freeAddr(b), freeAddr(b)
		admins = append(admins, admin)
		p := start(b, fmt.Sprintf("ws-pub-%d", i), "wsnode", "--redis", srv.URL(), "--addr", addr, "--admin-addr", admin, "--node-id", fmt.Sprintf("pub%d", i))
		waitReady(b, p, admin)
		nodes = append(nodes, addr)
	}
	var conns []*wsclient.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := wsclient.Dial(nodes[i%2], "/app/app-key?protocol=7")
		if err != nil {
			b.Fatalf("socket %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := c.Read(10 * time.Second); err != nil {
			b.Fatal(err)
		}
		if err := c.Send(`{"event":"pusher:subscribe","data":{"channel":"hot"}}`); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(10 * time.Second); err != nil {
			b.Fatal(err)
		}
	}
	waitCounted(b, counts.NewStore(rdb, keyspace.Space{}), "hot", n)
	// Both nodes must have joined the channel's topic in Redis.
	deadline := time.Now().Add(20 * time.Second)
	for {
		topic := keyspace.Space{}.App(e2eAppID) + "ev:hot"
		subs, err := rdb.PubSubNumSub(context.Background(), topic).Result()
		if err == nil && subs[topic] == 2 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("nodes never subscribed to the topic: %v %v", subs, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Each reader keeps its own latencies (no shared channel to contend
	// on); the reader completing an event's n-th delivery says so.
	var delivered atomic.Int64
	eventDone := make(chan struct{}, events)
	perReader := make([][]time.Duration, len(conns))
	for i, c := range conns {
		go func() {
			_ = c.SetReadDeadline(time.Time{}) // the deferred Close ends this loop
			for {
				frame, err := c.Read(0)
				if err != nil {
					return
				}
				// {"event":"bench","channel":"hot","data":"<unix nanos>"}
				if j := strings.Index(frame, `"data":"`); j >= 0 && strings.Contains(frame, `"event":"bench"`) {
					rest := frame[j+8:]
					if sent, err := strconv.ParseInt(rest[:strings.IndexByte(rest, '"')], 10, 64); err == nil {
						perReader[i] = append(perReader[i], time.Since(time.Unix(0, sent)))
						if delivered.Add(1)%int64(n) == 0 {
							eventDone <- struct{}{}
						}
					}
				}
			}
		}()
	}
	bus := fanout.New(rdb, fanout.Options{})
	profiled := profileDuring(b, admins[0], 2*time.Second)
	defer profiled()
	b.ResetTimer()
	for e := range events {
		if err := bus.Publish(context.Background(), "app-id", fanout.Message{Channel: "hot", Event: "bench", Data: strconv.FormatInt(time.Now().UnixNano(), 10)}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-eventDone:
		case <-time.After(30 * time.Second):
			b.Fatalf("event %d: only %d of %d deliveries arrived", e, delivered.Load()-int64(e*n), n)
		}
	}
	var all []time.Duration
	for _, l := range perReader {
		all = append(all, l...)
	}
	b.StopTimer()
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(n), "subscribers")
}

// profileDuring takes a CPU profile of the process serving admin while the
// benchmark runs, when HC_BENCH_PPROF_DIR names a folder to write it to.
// The returned func waits for it.
func profileDuring(b testing.TB, admin string, d time.Duration) func() {
	dir := os.Getenv("HC_BENCH_PPROF_DIR")
	if dir == "" || admin == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())))
		if err != nil {
			b.Logf("profile: %v", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+".cpu.pprof"))
		if err != nil {
			b.Logf("profile: %v", err)
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Logf("profile: %v", err)
		}
	}()
	return func() { <-done }
}

// BenchmarkLoopbackFloor is the machine's floor for BenchmarkPublishLatency:
// the same number of loopback TCP sockets, the same frame size and 20 events
// one after another, but the "server" is nothing except 16 goroutines (8 per
// pretend node, like wsnode's writers) each calling write(2) on its share of
// the sockets, and each reader a goroutine reading newline-ended frames.
// No WebSocket framing, no Redis, no queues: whatever headcount's p99 is
// above this is headcount's own cost. Run it alone:
//
//	go test -run '^$' -bench LoopbackFloor -benchtime 1x ./test/e2e/
func BenchmarkLoopbackFloor(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("HC_BENCH_SUBSCRIBERS")); err == nil && v > 0 {
		n = v
	}
	n = proctest.RaiseFileLimit(b, 2*n) / 2 // both ends of every socket are in this process
	const events, writers = 20, 16
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var servers, clients []net.Conn
	defer func() {
		for _, c := range append(servers, clients...) {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		clients, servers = append(clients, c), append(servers, s)
	}
	var delivered atomic.Int64
	eventDone := make(chan struct{}, events)
	perReader := make([][]time.Duration, n)
	for i, c := range clients {
		go func() {
			r := bufio.NewReaderSize(c, 256)
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return
				}
				j := bytes.Index(line, []byte(`"data":"`))
				rest := line[j+8:]
				sent, _ := strconv.ParseInt(string(rest[:bytes.IndexByte(rest, '"')]), 10, 64)
				perReader[i] = append(perReader[i], time.Since(time.Unix(0, sent)))
				if delivered.Add(1)%int64(n) == 0 {
					eventDone <- struct{}{}
				}
			}
		}()
	}
	b.ResetTimer()
	for e := range events {
		frame := []byte(`{"event":"bench","channel":"hot","data":"` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}` + "\n")
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := w; i < n; i += writers {
					if _, err := servers[i].Write(frame); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case <-eventDone:
		case <-time.After(30 * time.Second):
			b.Fatalf("event %d: only %d of %d deliveries arrived", e, delivered.Load()-int64(e*n), n)
		}
	}
	b.StopTimer()
	var all []time.Duration
	for _, l := range perReader {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(n), "subscribers")
}
