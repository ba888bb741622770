package e2e

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
)

// The soak's load and pace. Each wsnode's clients do one thing per tick:
// open a socket (subscribing it to 1-3 channels), close one (a close
// frame, a bare FIN or a RST), subscribe or unsubscribe one, or send a
// client event; about a third of ticks close a socket, so each node sees
// about 10 new clients a second, some 2,000 over the 2-minute run and
// 70,000 over the hour, never more than soakPerNode*1.1 at once.
const (
	soakShortDuration = 2 * time.Minute
	soakLongDuration  = time.Hour
	soakPerNode       = 60
	soakOpEvery       = 30 * time.Millisecond
	soakPublishEvery  = 150 * time.Millisecond // a single or batch publish
	soakSampleEvery   = 3 * time.Second
	soakCheckEvery    = 30 * time.Second // exact counts under load, churn held for ~150 ms
	soakSettleWithin  = time.Minute      // for the baseline to steady after the warm-up
	// soakReturnWithin is how long every figure has to come back once the
	// load stopped: past the webhooks' 3 s debounce, the log's 10 s trim,
	// the 10 s TTL of a cache channel's miss mark and the listing cache's
	// 1 s, with room for a loaded machine.
	soakReturnWithin = time.Minute
	soakStableRows   = 4 // the baseline: this many samples in a row within half their tolerance
)

// Where the soak's channels come from: a few names every client reuses,
// and fresh ones (a counter) as real apps make per room or per order.
var (
	soakPublic   = []string{"soak-0", "soak-1", "soak-2", "soak-3", "soak-4", "soak-5"}
	soakPrivate  = []string{"private-soak-0", "private-soak-1", "private-soak-2", "private-soak-3"}
	soakPresence = []string{"presence-soak-0", "presence-soak-1", "presence-soak-2"}
	soakCache    = []string{"cache-soak-0", "cache-soak-1", "cache-soak-2"}
)

// soakFigure is one sampled figure. back is how far above its baseline it
// may be once the load stopped, slope how steeply it may climb per minute
// under steady load; -1 leaves it unchecked (shown in the CSV only).
//
// Why these numbers. Each wsnode gets about 10 new clients a second: some
// 1,000 each after the baseline of the 2-minute run, 35,000 in the hour,
// never more than ~66 at once. Measured on a loaded 2-core machine, the
// live heap after a forced GC moves by ±50 KB from sample to sample at
// rest, goroutines and descriptors by 1-2, Redis's used_memory by ±60 KB.
//   - heap: 1 MiB back, plus 64 KiB per descriptor above the baseline's.
//     A leak of 1 KB per client leaves 1 MB after the short run and 35 MB
//     after the hour. What legitimately stays is bounded by the peak, not
//     by the total: Go maps keep the buckets of their largest size, and
//     go-redis keeps each pool connection, with its 32 KiB reader and 32
//     KiB writer, for 30 minutes idle, its pool having grown to the most
//     commands ever in flight at once (up to 10 per core). That ratchet
//     is the whole of the few hundred KB a wsnode ends above its baseline
//     (an exact heap profile, GODEBUG=memprofilerate=1, shows nothing
//     else over a few KB); each such connection is also a descriptor,
//     hence the allowance. 384 KiB/min slope: 1 KB per client is 600
//     KB/min per wsnode; the ratchet and the number of sockets open
//     (±10 around 60 per node, ~10 KB each) fit to at most 140 KB/min
//     over the short run's 80 s and 30 KB/min over 8 minutes.
//   - goroutines: 10 back, against one per client (1,000 per node at the
//     short length); the slack is idle keep-alive connections of httpapi's
//     webhook client (2 goroutines each). 20/min slope, against 600/min.
//   - fds: 10 back, 20/min, against one per client likewise; the slack is
//     the Redis pool's ratchet, a connection or two per run.
//   - Redis used_memory: 256 KiB back, 256 KiB/min. Leaked keys are
//     caught exactly by DBSIZE (0 back); this is for hash fields and
//     buffers: a field of ~100 bytes per fresh channel name left behind
//     passes the short run (~1,500 names subscribed) but is 3 MB over
//     the hour's 30,000.
//   - the event log: 8 entries back (it is trimmed every 10 s to below
//     what every webhook acknowledged, keeping the last one).
type soakFigure struct {
	name  string
	bytes bool
	back  float64
	slope float64
	fds   int // for a heap: the index of its process's descriptors, each over the baseline allowing soakPerFd more
}

// soakPerFd is the heap a Redis pool connection keeps (go-redis's reader
// and writer, 32 KiB each).
const soakPerFd = 64 * kib

const (
	kib = 1 << 10
	mib = 1 << 20
)

// soakProc is one process whose figures are sampled.
type soakProc struct{ name, admin string }

// soakRow is one sample: when, in which phase, the clients' sockets, and
// each figure in soak.figures order.
type soakRow struct {
	at      time.Duration
	phase   string
	sockets int
	v       []float64
}

type soak struct {
	t       *testing.T
	c       *chaos // the chaos suite's clients, truth and checks
	api     *pusher.Client
	apiHTTP *http.Client
	rdb     *redis.Client
	procs   []soakProc
	figures []soakFigure
	hooks   *soakHooks

	began   time.Time
	fresh   atomic.Int64 // fresh channel names handed out
	opened  atomic.Int64 // sockets established
	refused atomic.Int64 // sockets not established, subscriptions not acknowledged
	pubs    atomic.Int64 // publish requests answered 200
	pubErrs atomic.Int64
	events  atomic.Int64 // client events sent

	mu    sync.Mutex
	phase string
	rows  []soakRow
	dir   string // the CSV's, where the profiles go too
	csv   *csv.Writer
	file  *os.File
}

// soakSettings: a 2-minute run by default (skipped under -short), an hour
// with HC_SOAK=1 (make chaos); SOAK_DURATION overrides either.
func soakSettings(t *testing.T) time.Duration {
	d := soakShortDuration
	if os.Getenv("HC_SOAK") == "1" {
		d = soakLongDuration
	} else if testing.Short() {
		t.Skip("soak: skipped in -short (HC_SOAK=1 or make chaos runs the hour)")
	}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < time.Minute {
			t.Fatalf("SOAK_DURATION=%q: want a duration of 1m or more", v)
		}
	}
	// Warm-up, settle and return take minutes beyond the duration.
	if dl, ok := t.Deadline(); ok && time.Until(dl) < d+5*time.Minute {
		t.Fatalf("soak of %v: the test timeout leaves %v; raise -timeout to the duration + 5m at least", d, time.Until(dl).Round(time.Second))
	}
	return d
}

// TestSoak looks for what grows until a restart: two wsnodes, two
// cleaners, httpapi with a webhook receiver, under steady churn of
// sockets, subscriptions (public, private, presence and cache channels,
// reused and fresh names), client events and HTTP publishes (single and
// batch). Every few seconds it samples each process's live heap (after a
// forced GC), goroutines and open descriptors, and Redis's used memory,
// key count and event log length, into a CSV. After a warm-up round and
// its end it takes the baseline; then the load runs until the duration is
// up, with the counts checked exact every 30 s. At its end the counts
// must equal the clients' own view through the Store and the HTTP API,
// then, with every socket closed, be empty, `cleaner audit` must exit 0,
// and every figure must come back within its tolerance of the baseline;
// under the steady load no figure may trend upwards. 2 minutes by
// default; HC_SOAK=1 (make chaos) runs an hour, SOAK_DURATION sets it,
// SOAK_CSV where the samples go.
func TestSoak(t *testing.T) {
	duration := soakSettings(t)
	// Beside the other long tests: its figures are its own processes' and
	// its own Redis's, and it waits more than it computes.
	t.Parallel()
	warmUp := min(max(duration/8, 15*time.Second), 2*time.Minute)
	seed := uint64(time.Now().UnixNano())
	t.Logf("soak: %v in all, warm-up %v, seed %d", duration, warmUp, seed)

	k := &soak{t: t, hooks: newSoakHooks(t)}
	srv := redistest.New(t)
	k.rdb = srv.Client(t)
	appsFile := writeAppsFile(t, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
		"enableClientMessages": true, "enableSubscriptionCount": true,
		"webhooks": []map[string]any{{"url": k.hooks.URL + "/pusher/webhooks",
			"event_types": []string{"channel_occupied", "channel_vacated", "member_added", "member_removed",
				"subscription_count", "client_event"}}},
	}})
	common := []string{"--redis", srv.URL(), "--apps-file", appsFile}
	k.c = &chaos{t: t, cfg: chaosConfig{seed: seed, perNode: soakPerNode}, rng: rand.New(rand.NewPCG(seed, 1)),
		stats: map[string]*faultStats{}, socks: map[*chaosSock]struct{}{}, srv: srv, common: common,
		store: counts.NewStore(srv.Client(t), keyspace.Space{})}
	for _, name := range []string{"ws-a", "ws-b"} {
		s := &chaosSlot{name: name, n: startWSNode(t, name, common...)}
		waitReady(t, s.n.p, s.n.admin)
		k.c.slots = append(k.c.slots, s)
		k.procs = append(k.procs, soakProc{name, s.n.admin})
	}
	for _, name := range []string{"cleaner-1", "cleaner-2"} {
		cl := startCleaner(t, name, common...)
		waitReady(t, cl.p, cl.admin)
		k.c.cleaners = append(k.c.cleaners, cl)
		k.procs = append(k.procs, soakProc{name, cl.admin})
	}
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(slices.Clone(common), "--addr", api.addr, "--admin-addr", api.admin)...)
	waitReady(t, api.p, api.admin)
	k.procs = append(k.procs, soakProc{"httpapi", api.admin})
	k.apiHTTP = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	k.api = &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret, Host: api.addr, HTTPClient: k.apiHTTP}
	t.Cleanup(k.c.closeAll)

	k.figures = soakFigures(k.procs)
	k.openCSV()
	k.began = time.Now()
	stopSampling := k.sampleEvery(soakSampleEvery)
	defer stopSampling()

	// Warm-up: a round of the load, and its end, so that the baseline
	// holds what any run keeps (pools, caches of reused names, the
	// deliverer's consumer group).
	k.setPhase("warm-up")
	k.runLoad(warmUp, seed)
	k.setPhase("warm-up end")
	k.endLoad("warm-up")
	k.setPhase("settle")
	base := k.baseline()
	k.saveProfiles("baseline")

	// The soak proper, until the duration is up (at least half of it).
	loadFor := max(time.Until(k.began.Add(duration)), duration/2)
	k.setPhase("load")
	loadBegan := time.Since(k.began)
	t.Logf("soak: load for %v from t+%v", loadFor.Round(time.Second), loadBegan.Round(time.Second))
	k.runLoad(loadFor, seed+1)
	loadEnded := time.Since(k.began)
	k.setPhase("load end")
	k.endLoad("load")

	k.setPhase("return")
	last := k.waitReturn(base)
	stopSampling()
	k.saveProfiles("end")

	// The load's first tenth (at least 10 s) fills the pool; the rest is
	// steady.
	steadyFrom := loadBegan + max(loadFor/10, 10*time.Second)
	slopes := k.trends(steadyFrom, loadEnded)
	k.hooks.check(t)
	if n := metricSum(api.admin, "headcount_webhook_dropped_total"); n != 0 {
		t.Errorf("soak: httpapi dropped %v webhook events; the receiver answered every request 200", n)
	}
	if n := k.refused.Load(); n > 0 {
		t.Errorf("soak: %d subscriptions were not acknowledged (see the log); nothing should refuse one in a soak", n)
	}
	if n := k.pubErrs.Load(); n > 0 {
		t.Errorf("soak: %d publishes failed", n)
	}
	k.c.report()
	k.summary(base, last, slopes, loadBegan, loadEnded)
}

func soakFigures(procs []soakProc) []soakFigure {
	var f []soakFigure
	for _, p := range procs {
		fds := len(f) + 3
		f = append(f,
			soakFigure{name: p.name + "_heap_inuse", bytes: true, back: -1, slope: -1, fds: -1},
			soakFigure{name: p.name + "_heap_live", bytes: true, back: 1 * mib, slope: 384 * kib, fds: fds},
			soakFigure{name: p.name + "_goroutines", back: 10, slope: 20, fds: -1},
			soakFigure{name: p.name + "_fds", back: 10, slope: 20, fds: -1})
	}
	return append(f,
		soakFigure{name: "redis_used_memory", bytes: true, back: 256 * kib, slope: 256 * kib, fds: -1},
		// Exact, once the TTLs of caches and marks ran out.
		soakFigure{name: "redis_keys", back: 0, slope: -1, fds: -1},
		soakFigure{name: "event_log_len", back: 8, slope: -1, fds: -1})
}

// allowed is how high figure i of r may be over base.
func (k *soak) allowed(i int, base []float64, r soakRow) float64 {
	f := k.figures[i]
	a := base[i] + f.back
	if f.fds >= 0 {
		a += soakPerFd * max(0, r.v[f.fds]-base[f.fds])
	}
	return a
}

// openCSV creates the samples' file: SOAK_CSV, or soak.csv in a new
// directory under the system's temporary one, kept after a failed test or
// a long one (HC_SOAK) so the run can be plotted, and removed after a
// passing short one, so make test leaves nothing behind.
func (k *soak) openCSV() {
	path := os.Getenv("SOAK_CSV")
	if path == "" {
		dir, err := os.MkdirTemp("", "headcount-soak-")
		if err != nil {
			k.t.Fatal(err)
		}
		k.t.Cleanup(func() {
			if !k.t.Failed() && os.Getenv("HC_SOAK") == "" {
				_ = os.RemoveAll(dir)
			}
		})
		path = filepath.Join(dir, "soak.csv")
	}
	f, err := os.Create(path)
	if err != nil {
		k.t.Fatal(err)
	}
	k.dir, k.file, k.csv = filepath.Dir(path), f, csv.NewWriter(f)
	head := []string{"t_s", "phase", "sockets"}
	for _, fig := range k.figures {
		head = append(head, fig.name)
	}
	_ = k.csv.Write(head)
	k.csv.Flush()
	k.t.Cleanup(func() { _ = f.Close() })
	k.t.Logf("soak: samples every %v in %s", soakSampleEvery, path)
}

func (k *soak) setPhase(p string) {
	k.mu.Lock()
	k.phase = p
	k.mu.Unlock()
}

// sampleEvery samples until the returned func is called (idempotent).
func (k *soak) sampleEvery(d time.Duration) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			k.sample()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return sync.OnceFunc(func() { cancel(); <-done })
}

// sample reads every figure once and appends the row (and its CSV line).
// Each process's live heap is its heap_alloc right after a GC that the
// heap profile endpoint forces (GET /debug/pprof/heap?gc=1 runs
// runtime.GC before writing the profile): cheap at these heap sizes, and
// free of the garbage that makes heap_inuse swing by megabytes. Neither
// the profile nor /metrics is asked for compressed: a gzip writer is
// ~1 MB the process allocates right after the GC, or not when it finds
// one pooled, which made the figure jump by that much from sample to
// sample.
func (k *soak) sample() {
	v := make([]float64, 0, len(k.figures))
	for _, p := range k.procs {
		before := scrapeMetrics(p.admin)
		var after metricstest.Families // none: each figure unread
		if forceGC(p.admin) == nil {
			after = scrapeMetrics(p.admin)
		}
		v = append(v, before.Value("go_memstats_heap_inuse_bytes"), after.Value("go_memstats_heap_alloc_bytes"),
			after.Value("go_goroutines"), after.Value("process_open_fds"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mem := -1.0
	if info, err := k.rdb.Info(ctx, "memory").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if s, ok := strings.CutPrefix(line, "used_memory:"); ok {
				mem, _ = strconv.ParseFloat(s, 64)
			}
		}
	}
	keys, err := k.rdb.DBSize(ctx).Result()
	if err != nil {
		keys = -1
	}
	logLen, err := k.rdb.XLen(ctx, eventlog.Key(keyspace.Space{}, e2eAppID)).Result()
	if err != nil {
		logLen = -1
	}
	v = append(v, mem, float64(keys), float64(logLen))

	at := time.Since(k.began)
	sockets := k.c.total()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rows = append(k.rows, soakRow{at: at, phase: k.phase, sockets: sockets, v: v})
	line := []string{strconv.FormatFloat(at.Seconds(), 'f', 1, 64), k.phase, strconv.Itoa(sockets)}
	for _, x := range v {
		line = append(line, strconv.FormatFloat(x, 'f', -1, 64))
	}
	_ = k.csv.Write(line)
	k.csv.Flush()
}

// soakAdmin reads the admin ports: uncompressed (see sample), and one
// connection each, so the sampling holds a constant goroutine and
// descriptor in every process.
var soakAdmin = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 1}}

func forceGC(admin string) error {
	resp, err := soakAdmin.Get("http://" + admin + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	return nil
}

// scrapeMetrics returns an admin's /metrics, none when it cannot be read.
func scrapeMetrics(admin string) metricstest.Families {
	f, _ := metricstest.ScrapeWith(soakAdmin, "http://"+admin+"/metrics")
	return f
}

// saveProfiles writes each process's heap profile (after a GC) and
// goroutine dump into k.dir, named <process>-<tag>, so that a failed run
// can be looked into: go tool pprof -sample_index=inuse_space
// -diff_base ws-a-baseline.heap.pb.gz ws-a-end.heap.pb.gz.
func (k *soak) saveProfiles(tag string) {
	for _, p := range k.procs {
		for _, f := range []struct{ path, file string }{
			{"/debug/pprof/heap?gc=1", p.name + "-" + tag + ".heap.pb.gz"},
			{"/debug/pprof/goroutine?debug=1", p.name + "-" + tag + ".goroutines.txt"},
		} {
			resp, err := soakAdmin.Get("http://" + p.admin + f.path)
			if err != nil {
				k.t.Logf("soak: %s%s: %v", p.name, f.path, err)
				continue
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				err = os.WriteFile(filepath.Join(k.dir, f.file), b, 0o600)
			}
			if err != nil {
				k.t.Logf("soak: %s%s: %v", p.name, f.path, err)
			}
		}
	}
	k.t.Logf("soak: heap profiles and goroutine dumps at the %s in %s", tag, k.dir)
}

// rowsSince returns the rows sampled at or after at.
func (k *soak) rowsSince(at time.Duration) []soakRow {
	k.mu.Lock()
	defer k.mu.Unlock()
	i, _ := slices.BinarySearchFunc(k.rows, at, func(r soakRow, at time.Duration) int { return cmp.Compare(r.at, at) })
	return slices.Clone(k.rows[i:])
}

// runLoad churns sockets on both wsnodes and publishes for d, checking the
// counts exact every soakCheckEvery, then stops the load (the sockets
// stay open).
func (k *soak) runLoad(d time.Duration, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i, s := range k.c.slots {
		wg.Go(func() { k.churn(ctx, s, rand.New(rand.NewPCG(seed, uint64(i)))) })
	}
	wg.Go(func() { k.publish(ctx, rand.New(rand.NewPCG(seed, 99))) })
	tick := time.NewTicker(soakCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
			k.c.check("soak: under load", time.Now(), 5*time.Second, nil)
		}
	}
}

// churn is one wsnode's clients: one operation per tick, under the chaos
// gate shared, so that a comparison never sees one half done.
func (k *soak) churn(ctx context.Context, slot *chaosSlot, rng *rand.Rand) {
	tick := time.NewTicker(soakOpEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.c.gate.RLock()
		mine := k.socketsOf(slot)
		switch r := rng.IntN(100); {
		case len(mine) < soakPerNode*9/10:
			k.open(slot, rng)
		case r < 35:
			k.close(mine[rng.IntN(len(mine))], rng.IntN(3))
		case r < 55:
			if len(mine) < soakPerNode+soakPerNode/10 {
				k.open(slot, rng)
			}
		case r < 75:
			k.resubscribe(mine[rng.IntN(len(mine))], rng)
		default:
			k.clientEvent(mine[rng.IntN(len(mine))], rng)
		}
		k.c.gate.RUnlock()
	}
}

// socketsOf returns slot's sockets in socket id order.
func (k *soak) socketsOf(slot *chaosSlot) []*chaosSock {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	var mine []*chaosSock
	for s := range k.c.socks {
		if s.slot == slot {
			mine = append(mine, s)
		}
	}
	slices.SortFunc(mine, func(a, b *chaosSock) int { return strings.Compare(a.id, b.id) })
	return mine
}

// channel picks a channel to subscribe to: public 40%, private 20%,
// presence 20%, cache 20%; a fresh name 30% of the time.
func (k *soak) channel(rng *rand.Rand) string {
	var reused []string
	var prefix string
	switch r := rng.IntN(10); {
	case r < 4:
		reused, prefix = soakPublic, "soak-"
	case r < 6:
		reused, prefix = soakPrivate, "private-soak-"
	case r < 8:
		reused, prefix = soakPresence, "presence-soak-"
	default:
		reused, prefix = soakCache, "cache-soak-"
	}
	if rng.IntN(10) < 3 {
		return fmt.Sprintf("%sf%d", prefix, k.fresh.Add(1))
	}
	return reused[rng.IntN(len(reused))]
}

func (k *soak) open(slot *chaosSlot, rng *rand.Rand) {
	s := k.c.dial(slot, slot.n.addr, rng)
	if s == nil {
		k.refused.Add(1)
		return
	}
	k.opened.Add(1)
	for range 1 + rng.IntN(3) {
		k.subscribe(s, k.channel(rng))
	}
}

func (k *soak) subscribe(s *chaosSock, ch string) {
	if !k.c.subscribe(s, s.id, ch) {
		k.refused.Add(1)
	}
}

// wsCloseFrame is a client's close frame, code 1000, masked with a zero key.
var wsCloseFrame = []byte{0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8}

// close ends s: how 0 sends a close frame and waits for the server's, 1
// drops the TCP connection (FIN, no close frame), 2 resets it (RST).
func (k *soak) close(s *chaosSock, how int) {
	switch how {
	case 0:
		s.wmu.Lock()
		_ = s.c.SetWriteDeadline(time.Now().Add(chaosOpTimeout))
		_, err := s.c.Write(wsCloseFrame)
		s.wmu.Unlock()
		if err == nil {
			select {
			case <-s.gone: // the reader saw the server's close frame
			case <-time.After(chaosOpTimeout):
				k.t.Errorf("soak: %s on %s: no close frame answered within %v", s.id, s.slot.name, chaosOpTimeout)
			}
		}
	case 2:
		if tc, ok := s.c.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	k.c.drop(s)
}

// resubscribe unsubscribes s from one of its channels, or subscribes it to
// one more.
func (k *soak) resubscribe(s *chaosSock, rng *rand.Rand) {
	k.c.mu.Lock()
	subs := slices.Sorted(maps.Keys(s.subs))
	k.c.mu.Unlock()
	if len(subs) == 0 || rng.IntN(2) == 0 {
		k.subscribe(s, k.channel(rng))
		return
	}
	ch := subs[rng.IntN(len(subs))]
	k.c.mu.Lock()
	delete(s.subs, ch)
	k.c.lastChange = time.Now()
	k.c.mu.Unlock()
	if err := s.send(fmt.Sprintf(`{"event":"pusher:unsubscribe","data":{"channel":%q}}`, ch)); err != nil {
		k.c.drop(s)
	}
}

// clientEvent sends a client event on one of s's private or presence
// channels, if it holds one.
func (k *soak) clientEvent(s *chaosSock, rng *rand.Rand) {
	k.c.mu.Lock()
	var chans []string
	for ch := range s.subs {
		if strings.HasPrefix(ch, "private-") || strings.HasPrefix(ch, "presence-") {
			chans = append(chans, ch)
		}
	}
	k.c.mu.Unlock()
	if len(chans) == 0 {
		return
	}
	slices.Sort(chans)
	ch := chans[rng.IntN(len(chans))]
	if err := s.send(fmt.Sprintf(`{"event":"client-soak","channel":%q,"data":{"n":%d}}`, ch, k.events.Add(1))); err != nil {
		k.c.drop(s)
	}
}

// publish sends signed HTTP events every soakPublishEvery: a third are
// batches of 2-5, the rest single events to 1-3 channels, over reused
// names of every kind and fresh public and private ones. Fresh cache
// channels are never published to: each would keep its event in Redis for
// 30 minutes, so the key count could not come back within a run.
func (k *soak) publish(ctx context.Context, rng *rand.Rand) {
	target := func() string {
		switch r := rng.IntN(10); {
		case r < 3:
			return soakPublic[rng.IntN(len(soakPublic))]
		case r < 4:
			return soakPrivate[rng.IntN(len(soakPrivate))]
		case r < 5:
			return soakPresence[rng.IntN(len(soakPresence))]
		case r < 7:
			return soakCache[rng.IntN(len(soakCache))]
		case r < 9:
			return fmt.Sprintf("soak-p%d", k.fresh.Add(1))
		default:
			return fmt.Sprintf("private-soak-p%d", k.fresh.Add(1))
		}
	}
	// Every reused cache channel holds an event from the first round on,
	// so the baseline's key count includes them.
	var batch []pusher.Event
	for _, ch := range soakCache {
		batch = append(batch, pusher.Event{Channel: ch, Name: "soak", Data: map[string]int{"n": 0}})
	}
	k.count(k.api.TriggerBatch(batch))
	tick := time.NewTicker(soakPublishEvery)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		data := map[string]int{"n": n}
		if rng.IntN(3) == 0 {
			batch = batch[:0]
			for range 2 + rng.IntN(4) {
				batch = append(batch, pusher.Event{Channel: target(), Name: "soak", Data: data})
			}
			k.count(k.api.TriggerBatch(batch))
			continue
		}
		var chans []string
		for range 1 + rng.IntN(3) {
			if ch := target(); !slices.Contains(chans, ch) {
				chans = append(chans, ch)
			}
		}
		k.count(nil, k.api.TriggerMulti(chans, "soak", data))
	}
}

func (k *soak) count(_ any, err error) {
	if err != nil {
		k.pubErrs.Add(1)
		k.t.Logf("soak: publish: %v", err)
		return
	}
	k.pubs.Add(1)
}

// endLoad checks, with the load stopped and the sockets still open, that
// the Store and the HTTP API agree with the clients; then closes every
// socket (a third each with a close frame, a FIN, a RST) and checks that
// nothing is left counted or listed and that `cleaner audit` exits 0.
func (k *soak) endLoad(round string) {
	t := k.t
	k.c.check("soak: "+round+" stopped", time.Now(), 5*time.Second, nil)
	k.c.mu.Lock()
	chans, users, conns := k.c.truth(nil)
	k.c.mu.Unlock()
	want := map[string]int{}
	for ch, n := range chans {
		want[ch] = int(n)
	}
	waitCounts(t, k.api, want, 10*time.Second, "soak: the HTTP API's counts after the "+round)
	k.waitUserCounts(users, 10*time.Second)
	t.Logf("soak: %s stopped: %d sockets, %d channels, %d presence channels exact in the Store and the HTTP API",
		round, conns, len(chans), len(users))

	k.c.mu.Lock()
	all := slices.Collect(maps.Keys(k.c.socks))
	k.c.mu.Unlock()
	slices.SortFunc(all, func(a, b *chaosSock) int { return strings.Compare(a.id, b.id) })
	k.c.gate.RLock()
	for i, s := range all {
		k.close(s, i%3)
	}
	k.c.gate.RUnlock()
	k.c.check("soak: "+round+" all closed", time.Now(), 5*time.Second, nil)
	waitCounts(t, k.api, map[string]int{}, 10*time.Second, "soak: no channel listed once every socket closed")
	out, err := exec.Command(filepath.Join(binaries(t), "cleaner"), append(slices.Clone(k.c.common), "audit")...).CombinedOutput()
	if err != nil {
		t.Errorf("soak: `cleaner audit` after the %s: %v\n%s", round, err, out)
	}
	// The test's own keep-alive connections to httpapi would hold a
	// goroutine and a descriptor there each.
	k.apiHTTP.CloseIdleConnections()
}

// waitUserCounts polls the HTTP API until every presence channel in want
// has its user_count.
func (k *soak) waitUserCounts(want map[string]int64, within time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var wrong []string
		for _, ch := range slices.Sorted(maps.Keys(want)) {
			got, err := k.api.Channel(ch, pusher.ChannelParams{Info: ptr("user_count")})
			if err != nil || int64(got.UserCount) != want[ch] {
				wrong = append(wrong, fmt.Sprintf("%s: %v (error %v), want %d", ch, got, err, want[ch]))
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("soak: user_count through the HTTP API after %v: %v", within, wrong)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval
	}
}

// baseline waits until soakStableRows samples in a row hold every checked
// figure within half its tolerance (exactly, for those with none), and
// returns their medians.
func (k *soak) baseline() []float64 {
	from := time.Since(k.began)
	deadline := time.Now().Add(soakSettleWithin)
	for {
		rows := k.rowsSince(from)
		if len(rows) >= soakStableRows {
			last := rows[len(rows)-soakStableRows:]
			if spread := k.unsteady(last); spread == "" {
				base := make([]float64, len(k.figures))
				for i := range k.figures {
					var col []float64
					for _, r := range last {
						col = append(col, r.v[i])
					}
					slices.Sort(col)
					base[i] = col[len(col)/2]
				}
				k.t.Logf("soak: baseline at t+%v (%d samples after the warm-up)", last[len(last)-1].at.Round(time.Second), len(rows))
				return base
			} else if time.Now().After(deadline) {
				k.t.Fatalf("soak: no steady baseline %v after the warm-up: %s", soakSettleWithin, spread)
			}
		}
		time.Sleep(200 * time.Millisecond) // a poll interval, shorter than the samples'
	}
}

// unsteady names the figures whose spread over rows is over half their
// tolerance, or that could not be read.
func (k *soak) unsteady(rows []soakRow) string {
	var out []string
	for i, f := range k.figures {
		if f.back < 0 {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range rows {
			lo, hi = min(lo, r.v[i]), max(hi, r.v[i])
		}
		if lo < 0 || hi-lo > f.back/2 {
			out = append(out, fmt.Sprintf("%s %v..%v", f.name, lo, hi))
		}
	}
	return strings.Join(out, ", ")
}

// waitReturn waits until one sample holds every checked figure within its
// tolerance of base, failing after soakReturnWithin with those that are
// not, and returns that sample (the last one on failure).
func (k *soak) waitReturn(base []float64) soakRow {
	from := time.Since(k.began)
	deadline := time.Now().Add(soakReturnWithin)
	seen := 0
	for {
		rows := k.rowsSince(from)
		for _, r := range rows[seen:] {
			if k.above(base, r) == "" {
				k.t.Logf("soak: every figure back within its tolerance at t+%v, %v after the load stopped",
					r.at.Round(time.Second), (r.at - from).Round(time.Second))
				return r
			}
		}
		seen = len(rows)
		if time.Now().After(deadline) && seen > 0 {
			last := rows[seen-1]
			k.t.Errorf("soak: not back to the baseline %v after the load stopped: %s", soakReturnWithin, k.above(base, last))
			return last
		}
		time.Sleep(200 * time.Millisecond) // a poll interval, shorter than the samples'
	}
}

// above names the checked figures of r over their baseline's tolerance.
func (k *soak) above(base []float64, r soakRow) string {
	var out []string
	for i, f := range k.figures {
		if a := k.allowed(i, base, r); f.back >= 0 && (r.v[i] < 0 || r.v[i] > a) {
			out = append(out, fmt.Sprintf("%s %s, baseline %s, allowed up to %s", f.name, f.show(r.v[i]), f.show(base[i]), f.show(a)))
		}
	}
	return strings.Join(out, "; ")
}

// trends fits a line to each checked figure's samples in [from, to) and
// fails those climbing faster than their slope per minute, over the whole
// window and over each of its halves; it returns the whole window's slopes
// (NaN when unchecked). A leak climbs in both halves. A one-time step, a
// pool growing once to the load's concurrency, is in one half only: a
// cleaner's heap that stepped up 300 KiB once and stayed flat fitted 406
// KiB a minute over the whole window.
func (k *soak) trends(from, to time.Duration) []float64 {
	var rows []soakRow
	for _, r := range k.rowsSince(from) {
		if r.at < to && r.phase == "load" {
			rows = append(rows, r)
		}
	}
	slopes := make([]float64, len(k.figures))
	if len(rows) < 5 {
		k.t.Errorf("soak: %d samples of steady load, too few for a trend", len(rows))
		return slopes
	}
	for i, f := range k.figures {
		slopes[i] = math.NaN()
		if f.slope < 0 {
			continue
		}
		xs, ys := make([]float64, len(rows)), make([]float64, len(rows))
		for j, r := range rows {
			xs[j], ys[j] = r.at.Minutes(), r.v[i]
		}
		slopes[i] = slope(xs, ys)
		half := len(rows) / 2
		if slopes[i] > f.slope && slope(xs[:half], ys[:half]) > f.slope && slope(xs[half:], ys[half:]) > f.slope {
			k.t.Errorf("soak: %s climbs %s a minute under steady load (over %d samples, %v), limit %s",
				f.name, f.show(slopes[i]), len(rows), (rows[len(rows)-1].at - rows[0].at).Round(time.Second), f.show(f.slope))
		}
	}
	return slopes
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i], my+ys[i]
	}
	mx, my = mx/float64(len(xs)), my/float64(len(xs))
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// show prints a value of f: bytes in KiB or MiB.
func (f soakFigure) show(v float64) string {
	switch {
	case f.bytes && math.Abs(v) >= 10*mib:
		return fmt.Sprintf("%.1f MiB", v/mib)
	case f.bytes:
		return fmt.Sprintf("%.0f KiB", v/kib)
	default:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
}

// summary logs the run's figures: for each, its baseline, its peak under
// load, its value once back, its steady-load trend and their limits.
func (k *soak) summary(base []float64, back soakRow, slopes []float64, loadFrom, loadTo time.Duration) {
	peak := make([]float64, len(k.figures))
	maxSockets := 0
	for _, r := range k.rowsSince(loadFrom) {
		if r.at >= loadTo {
			break
		}
		maxSockets = max(maxSockets, r.sockets)
		for i, x := range r.v {
			peak[i] = max(peak[i], x)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nsoak: %d sockets opened in all (at most %d at once under load), %d channel names made fresh, %d client events sent, %d publish requests, %d webhook events received %v\n",
		k.opened.Load(), maxSockets, k.fresh.Load(), k.events.Load(), k.pubs.Load(), k.hooks.total(), k.hooks.counts())
	fmt.Fprintf(&b, "| figure | baseline | peak under load | back | tolerance | trend /min under load | limit |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, f := range k.figures {
		tol, lim, tr := "-", "-", "-"
		if f.back >= 0 {
			tol = "+" + f.show(f.back)
			if a := k.allowed(i, base, back); a > base[i]+f.back {
				tol += fmt.Sprintf(" (%s: fds up)", f.show(a-base[i]))
			}
		}
		if f.slope >= 0 {
			lim, tr = f.show(f.slope), f.show(slopes[i])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", f.name, f.show(base[i]), f.show(peak[i]), f.show(back.v[i]), tol, tr, lim)
	}
	k.t.Log(b.String())
}

// soakHooks is the app's webhook endpoint: every request must pass
// pusher-http-go's validation; it counts the events by name.
type soakHooks struct {
	*httptest.Server
	mu      sync.Mutex
	byName  map[string]int
	invalid []string
}

func newSoakHooks(t *testing.T) *soakHooks {
	h := &soakHooks{byName: map[string]int{}}
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		hook, err := client.Webhook(req.Header, body)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			if len(h.invalid) < 10 {
				h.invalid = append(h.invalid, fmt.Sprintf("%.200s: %v", body, err))
			}
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, e := range hook.Events {
			h.byName[e.Name]++
		}
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *soakHooks) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.byName)
}

func (h *soakHooks) total() int {
	n := 0
	for _, v := range h.counts() {
		n += v
	}
	return n
}

// check fails t for an invalid request or an event type never received.
func (h *soakHooks) check(t *testing.T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.invalid) > 0 {
		t.Errorf("soak: invalid webhook requests: %v", h.invalid)
	}
	for _, name := range []string{"channel_occupied", "channel_vacated", "member_added", "member_removed", "subscription_count", "client_event"} {
		if h.byName[name] == 0 {
			t.Errorf("soak: no %s webhook received: %v", name, h.byName)
		}
	}
}
