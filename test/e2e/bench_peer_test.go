package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/load"
)

// The servers BenchmarkPeer compares. The peer is soketi, pinned in
// test/peer/package.json and installed there by make bench (npm ci), never
// by make test.
const (
	headcountServer = "headcount"
	peerServer      = "soketi"
	// headcountGoroutine is headcount with --transport goroutine: the
	// transport that serves each socket on a goroutine of its own.
	headcountGoroutine = "headcount-goroutine"
	// headcountUnanchored is headcount with --exit-anchor=false: a killed
	// node's connections close only once the kernel has freed its memory.
	headcountUnanchored = "headcount-unanchored"
)

// BenchmarkPeer runs the same measures against headcount and soketi in
// the same run, rounds rotating the order (headcount first in odd
// rounds, soketi first in even ones; idle-memory runs once, below) on
// fresh processes and a fresh redis-server each time, and reports each
// server's median over the rounds as Peer/<measure>/<server>; scripts/bench.sh tabulates those lines with
// the ratio soketi/headcount. Both servers run with their default timings,
// logging at warn (headcount) or without debug (soketi), on loopback.
//   - idle-memory: each server's idle process memory per socket, settled
//     (peerIdleMemory): one process per server grown through three sizes,
//     the three at once, in one round; the kernel's half beside it.
//   - connect: the load tool's storm (as BenchmarkLoad's) of
//     HC_PEER_SOCKETS (default 10,000) sockets into one node, 512 dials
//     in flight from 30 source addresses:
//     the node's CPU per 1,000 sockets connected and subscribed, read from
//     /proc for both (headcount's httpapi and cleaners aside: soketi's node
//     is its HTTP API too), redis-server's CPU over the whole run (connect,
//     subscribe and close) per 1,000 sockets, sockets accepted per second,
//     and the time until the HTTP API's channel listing counts them all.
//   - count-read: two nodes holding 1,000 sockets on 10 channels; signed
//     GET /apps/{id}/channels/{name}?info=subscription_count through the
//     server's HTTP API (headcount's httpapi, soketi's first node), 50 a
//     second for 4 s (open loop, latency from each request's scheduled
//     start), with both nodes healthy and then with the second node hung
//     (SIGSTOP); and what share of the channel's 100 subscriptions the
//     first read after the hang counts.
//   - delivery: HC_PEER_SUBSCRIBERS (default 10,000) subscribers of one
//     channel over two nodes, 5 events a second for 4 s through the HTTP
//     API (the load tool, as BenchmarkLoad's delivery): p50/p99, and the
//     nodes' CPU time per event delivered (headcount's httpapi aside:
//     soketi's first node is its HTTP API too).
//   - delivery-split-cpus: the same with every server-side process on
//     one half of the CPUs and the load tool on the other.
//     Both delivery measures run five rounds unless HC_PEER_ROUNDS says
//     otherwise (peerRounds), after a warm-up round that is not reported,
//     as every measure of more than one round does (sideBySide); the
//     first cluster of the process used to be an outlier of whichever
//     server went first. HC_PEER_TRACE=dir keeps a trace and a CPU
//     profile of headcount's nodes during each round's hold (profileHold).
//   - recovery and recovery-large: many SIGKILLs in one run, each of a
//     fresh node of 1,000 sockets (30 kills) or 50,000 or what the
//     open-file limit allows (10), beside a live node of 1,000: the time
//     until the HTTP API (headcount's httpapi, soketi's live node), read
//     back to back, counts every channel as the live node alone; p50,
//     p99 and max over the kills, not a median of rounds (recovery in
//     bench_recovery_peer_test.go says how).
//
// idle-memory, connect and both delivery measures also run headcount as
// headcount-goroutine (--transport goroutine), so that the event loop,
// the default, is compared with the transport it replaced in the same run.
//
// It skips when soketi is not installed. Run it with make bench, or:
//
//	(cd test/peer && npm ci)
//	go test -run '^$' -bench Peer -benchtime 1x -timeout 90m ./test/e2e/
func BenchmarkPeer(b *testing.B) {
	peerServerJS(b)
	sockets := envInt("HC_PEER_SOCKETS", 10000)
	subscribers := envInt("HC_PEER_SUBSCRIBERS", 10000)
	proctest.RaiseFileLimit(b, max(sockets, subscribers))

	peerIdleMemory(b)

	sideBySide(b, "connect", func(b *testing.B, kind string) []peerMetric {
		c := startCluster(b, kind, 1)
		redisBefore := redisCPU(b, c.rdb)
		sum := runLoad(b, load.Config{WS: c.ws, API: c.api, PIDs: c.pids(), Sockets: sockets,
			SourceIPs: 30, Concurrency: 512, ProbeEvery: -1})
		redisUsed := redisCPU(b, c.rdb) - redisBefore
		return []peerMetric{
			{"node-cpu-ms/1000sockets", sum.RampCPUPerSocketMs * 1000},
			{"redis-cpu-ms/1000sockets", redisUsed * 1000 * 1000 / float64(sockets)},
			{"accepted/s", sum.AcceptedPerSecond},
			{"s-to-all-counted", sum.CountedAllSeconds},
		}
	}, headcountServer, headcountGoroutine, peerServer)

	sideBySide(b, "count-read", func(b *testing.B, kind string) []peerMetric {
		c := startCluster(b, kind, 2)
		for i := range 1000 {
			openSubscribed(b, c.ws[i%2], "count-"+strconv.Itoa(i/2%10)) // each channel on both nodes
		}
		waitAPICount(b, c.api, "count-", 10, 1000)
		path := "/apps/" + e2eAppID + "/channels/count-0"
		u := signedURL(c.api, path, url.Values{"info": {"subscription_count"}})
		tr := &http.Transport{MaxIdleConnsPerHost: 512}
		defer tr.CloseIdleConnections()
		client := &http.Client{Timeout: 20 * time.Second, Transport: tr}
		healthy := pacedReads(b, client, u, 50, 200)
		c.nodes[1].signal(syscall.SIGSTOP)
		defer c.nodes[1].signal(syscall.SIGCONT)
		// What the first read after the hang answers: count-0 holds 100
		// subscriptions, half of them on the hung node.
		first := apiCounts(c.api, "count-", 1)[0]
		hung := pacedReads(b, client, u, 50, 200)
		return []peerMetric{
			{"healthy-p50-ms", ms(pct(healthy, 0.50))}, {"healthy-p99-ms", ms(pct(healthy, 0.99))},
			{"one-hung-p50-ms", ms(pct(hung, 0.50))}, {"one-hung-p99-ms", ms(pct(hung, 0.99))},
			{"one-hung-first-read-%-counted", float64(first)},
		}
	})

	deliver := func(b *testing.B, c cluster) []peerMetric {
		profiled := profileHold(b, c)
		sum := runLoad(b, load.Config{WS: c.ws, API: c.api, PIDs: c.pids(), Sockets: subscribers, HotShare: 1,
			SourceIPs: 10, PublishRate: 5, Hold: 4 * time.Second, ProbeEvery: -1})
		profiled()
		if sum.Delivery.N < int(sum.Published)*subscribers*9/10 {
			b.Fatalf("%d deliveries for %d events to %d subscribers", sum.Delivery.N, sum.Published, subscribers)
		}
		return []peerMetric{{"p50-ms", sum.Delivery.P50}, {"p99-ms", sum.Delivery.P99},
			{"node-cpu-us/delivery", sum.HoldCPUPerDeliveryUs}, {"load-tool-cpu-us/delivery", sum.ToolCPUPerDeliveryUs},
			{"subscribers", float64(subscribers)}}
	}
	sideBySide(b, "delivery", func(b *testing.B, kind string) []peerMetric {
		return deliver(b, startCluster(b, kind, 2))
	}, headcountServer, headcountGoroutine, peerServer)

	// delivery-split-cpus: the same, with every server-side process
	// (redis-server included) on half the CPUs and this process, the load
	// tool, on the other half. On a small machine the load tool's readers
	// and the servers' writers otherwise take turns on the same cores,
	// which a deployment, whose clients are elsewhere, never sees.
	if serverCPUs, loadCPUs, ok := proctest.SplitCPUs(); ok {
		sideBySide(b, "delivery-split-cpus", func(b *testing.B, kind string) []peerMetric {
			c := startCluster(b, kind, 2)
			for _, pid := range c.all {
				proctest.Pin(b, pid, serverCPUs)
			}
			proctest.Pin(b, os.Getpid(), loadCPUs)
			defer proctest.Pin(b, os.Getpid(), append(slices.Clone(serverCPUs), loadCPUs...))
			return deliver(b, c)
		}, headcountServer, headcountGoroutine, peerServer)
	}

	peerRecovery(b)
}

// peerMetric is one measured value and its unit.
type peerMetric struct {
	unit  string
	value float64
}

// peerRounds is how many rounds sideBySide runs measure: HC_PEER_ROUNDS,
// else 3, or 5 for the delivery measures, whose rounds differ the most
// from one to the next: their figures are medians of five.
func peerRounds(measure string) int {
	if strings.HasPrefix(measure, "delivery") {
		return envInt("HC_PEER_ROUNDS", 5)
	}
	return envInt("HC_PEER_ROUNDS", 3)
}

// sideBySide runs measure on each server (kinds; headcount and soketi
// unless given) for peerRounds(measure) rounds, as <measure>/round=N/<server>,
// rotating which server goes first, then reports each server's median per
// unit as <measure>/<server>.
func sideBySide(b *testing.B, measure string, run func(b *testing.B, kind string) []peerMetric, kinds ...string) {
	if len(kinds) == 0 {
		kinds = []string{headcountServer, peerServer}
	}
	b.Run(measure, func(b *testing.B) {
		results := map[string][][]peerMetric{}
		if peerRounds(measure) > 1 {
			// A round of the last kind first, not reported: the process's
			// first cluster pays for what is done first (the load tool's heap
			// and goroutine stacks growing, binaries read from disk), which
			// round 1's first kind would otherwise carry alone.
			b.Run("warm-up/"+kinds[len(kinds)-1], func(b *testing.B) {
				b.StopTimer()
				run(b, kinds[len(kinds)-1])
			})
		}
		for r := range peerRounds(measure) {
			order := append(slices.Clone(kinds[r%len(kinds):]), kinds[:r%len(kinds)]...)
			for _, kind := range order {
				b.Run("round="+strconv.Itoa(r+1)+"/"+kind, func(b *testing.B) {
					b.StopTimer()
					m := run(b, kind)
					for _, x := range m {
						b.ReportMetric(x.value, x.unit)
					}
					results[kind] = append(results[kind], m)
				})
			}
		}
		for _, kind := range kinds {
			rs := results[kind]
			if len(rs) != peerRounds(measure) {
				continue // a round failed; it said why
			}
			b.Run(kind, func(b *testing.B) {
				for i, x := range rs[0] {
					var vs []float64
					for _, r := range rs {
						vs = append(vs, r[i].value)
					}
					slices.Sort(vs)
					b.ReportMetric(vs[len(vs)/2], x.unit)
				}
			})
		}
	})
}

// cluster is one server under test on loopback, over its own redis-server.
type cluster struct {
	ws    []string // each node's WebSocket host:port
	nodes []*proc  // each node's process, in the order of ws
	admin []string // each headcount node's admin host:port, in the order of ws
	api   string   // the HTTP API: headcount's httpapi, or soketi's first node
	rdb   *redis.Client
	all   []int // every server-side process: nodes, API, cleaners, redis-server

	srv      *redistest.Server // the nodes' redis-server, for startNode
	cleaners []string          // headcount's cleaners' admin host:port
}

func (c cluster) pids() []int {
	var out []int
	for _, p := range c.nodes {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// startCluster starts kind with nodes WebSocket nodes, each ready. For
// headcount: the wsnodes, two cleaners and one httpapi, with their default
// timings. For soketi: nodes sharing the Redis adapter.
func startCluster(b *testing.B, kind string, nodes int) cluster {
	b.Helper()
	srv := redistest.New(b)
	c := cluster{rdb: srv.Client(b), srv: srv, all: []int{srv.PID()}}
	switch kind {
	case headcountServer, headcountGoroutine, headcountUnanchored:
		quiet := []string{"--redis", srv.URL(), "--log-level", "warn"}
		for i := range 2 {
			cl := startDefault(b, "cleaner-"+strconv.Itoa(i), "cleaner", quiet...)
			waitReady(b, cl.p, cl.admin)
			c.all, c.cleaners = append(c.all, cl.p.cmd.Process.Pid), append(c.cleaners, cl.admin)
		}
		for i := range nodes {
			n := startNode(b, kind, srv, strconv.Itoa(i))
			c.ws, c.nodes, c.admin = append(c.ws, n.addr), append(c.nodes, n.p), append(c.admin, n.admin)
		}
		api := startHTTPAPIs(b, 1, quiet...)[0]
		c.api, c.all = api.addr, append(c.all, api.p.cmd.Process.Pid)
	case peerServer:
		for i := range nodes {
			n := startNode(b, kind, srv, strconv.Itoa(i))
			c.ws, c.nodes = append(c.ws, n.addr), append(c.nodes, n.p)
		}
		c.api = c.ws[0]
	default:
		b.Fatalf("unknown server %q", kind)
	}
	c.all = append(c.all, c.pids()...)
	return c
}

// startNode starts one WebSocket node of kind over srv, ready: a wsnode
// with its default timings and --node-id n<id>, or a soketi node on the
// Redis adapter. admin is a wsnode's admin host:port.
func startNode(b *testing.B, kind string, srv *redistest.Server, id string) node {
	b.Helper()
	switch kind {
	case headcountServer, headcountGoroutine, headcountUnanchored:
		args := []string{"--redis", srv.URL(), "--log-level", "warn", "--node-id", "n" + id}
		switch kind {
		case headcountGoroutine:
			args = append(args, "--transport", config.TransportGoroutine)
		case headcountUnanchored:
			args = append(args, "--exit-anchor=false")
		}
		n := startDefault(b, "ws-"+id, "wsnode", args...)
		waitReady(b, n.p, n.admin)
		return n
	case peerServer:
		js := peerServerJS(b)
		_, redisPort, _ := strings.Cut(srv.Addr, ":")
		addr := freeAddr(b)
		_, port, _ := strings.Cut(addr, ":")
		_, metricsPort, _ := strings.Cut(freeAddr(b), ":")
		env := []string{
			"SOKETI_HOST=127.0.0.1", "SOKETI_PORT=" + port,
			"SOKETI_DEFAULT_APP_ID=" + e2eAppID, "SOKETI_DEFAULT_APP_KEY=" + e2eAppKey, "SOKETI_DEFAULT_APP_SECRET=" + e2eAppSecret,
			"SOKETI_ADAPTER_DRIVER=redis", "SOKETI_DB_REDIS_HOST=127.0.0.1", "SOKETI_DB_REDIS_PORT=" + redisPort,
			// The /usage endpoint always listens; Prometheus stays off.
			"SOKETI_METRICS_ENABLED=false", "SOKETI_METRICS_HOST=127.0.0.1", "SOKETI_METRICS_SERVER_PORT=" + metricsPort,
			// Node discovery (UDP, always on) says hello to loopback
			// only, not the default 255.255.255.255 broadcast. Its
			// socket still binds 0.0.0.0 (node-discover's bind address
			// has no soketi setting); it only sends to 127.0.0.1.
			"SOKETI_CLUSTER_HOST=127.0.0.1", "SOKETI_CLUSTER_UNICAST_ADDRESSES=127.0.0.1",
			"SOKETI_CLUSTER_PORT=" + strconv.Itoa(proctest.FreePort(b)),
			"SOKETI_DEBUG=false",
		}
		p := startEnv(b, "soketi-"+id, nodeBinary(b), env, js, "start")
		waitOK(b, p, "http://"+addr+"/ready", 30*time.Second)
		return node{addr: addr, p: p}
	}
	b.Fatalf("unknown server %q", kind)
	return node{}
}

// peerServerJS is soketi's entry point in test/peer; it skips the
// benchmark when soketi (or node) is not installed.
func peerServerJS(b testing.TB) string {
	js := filepath.Join(repoRoot(b), "test", "peer", "node_modules", "@soketi", "soketi", "bin", "server.js")
	if _, err := os.Stat(js); err != nil {
		b.Skip("soketi is not installed in test/peer (make bench installs it with npm ci): skipping the side-by-side benchmark")
	}
	nodeBinary(b)
	return js
}

func nodeBinary(b testing.TB) string {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not installed: skipping the side-by-side benchmark")
	}
	return node
}

// apiCounts reads prefix0..prefix<channels-1>'s subscription counts
// through the HTTP API at api, one signed GET each; -1 where a read failed.
func apiCounts(api, prefix string, channels int) []int64 {
	out := make([]int64, channels)
	for i := range out {
		out[i] = -1
		path := "/apps/" + e2eAppID + "/channels/" + prefix + strconv.Itoa(i)
		resp, err := http.Get(signedURL(api, path, url.Values{"info": {"subscription_count"}}))
		if err != nil {
			continue
		}
		var ans struct {
			SubscriptionCount int64 `json:"subscription_count"`
		}
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&ans) == nil {
			out[i] = ans.SubscriptionCount
		}
		resp.Body.Close()
	}
	return out
}

// waitAPICount polls the HTTP API until the channels' counts add up to want.
func waitAPICount(b testing.TB, api, prefix string, channels int, want int64) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sum int64
		for _, n := range apiCounts(api, prefix, channels) {
			sum += n
		}
		if sum == want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the HTTP API counts %d of %d subscriptions", sum, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pacedReads sends n GETs of u at rate a second (open loop: each on its own
// goroutine at its scheduled time) and returns their latencies from the
// scheduled start; any failed request fails b.
func pacedReads(b testing.TB, c *http.Client, u string, rate, n int) []time.Duration {
	if _, err := getOnce(c, u); err != nil {
		b.Fatal(err)
	}
	var lat latencies
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
		time.Sleep(time.Until(at)) // pacing the open loop, not waiting for a result
		wg.Go(func() {
			if _, err := getOnce(c, u); err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
				return
			}
			lat.add([]time.Duration{time.Since(at)})
		})
	}
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	return lat.all
}

// pct is the p-th percentile of d (sorted in place).
func pct(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[int(p*float64(len(d)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// redisCPU is redis-server's CPU time so far in seconds (INFO cpu).
func redisCPU(b testing.TB, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", k, err)
			}
			sum += f
		}
	}
	return sum
}

// envInt is a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
