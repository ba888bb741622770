package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/wsclient"
)

// Chaos suite constants. The cluster runs with the suite's heartbeat,
// dead-after, scan interval and lease TTL (cluster_test.go).
const (
	chaosApp       = "app-id"
	chaosNodes     = 3
	chaosSlack     = time.Second // measurement and scheduling slack on every bound
	chaosSettle    = 150 * time.Millisecond
	chaosOpTimeout = 6 * time.Second // above the wsnode's 5 s Redis timeout on a presence subscribe

	// The short run is part of `go test ./...`: fewer sockets, a fixed seed.
	chaosShortDuration = 30 * time.Second
	chaosShortSeed     = 1
	chaosShortPerNode  = 40
	chaosLongDuration  = 2 * time.Minute
	chaosLongPerNode   = 100
	// chaosSliceSize is every process's --slice-size: small enough that
	// every reap, audit and republish takes many atomic units.
	chaosSliceSize = 2
)

var (
	chaosPublic   = []string{"chaos-0", "chaos-1", "chaos-2", "chaos-3", "chaos-4", "chaos-5"}
	chaosPresence = []string{"presence-chaos-0", "presence-chaos-1", "presence-chaos-2"}
)

// chaosConfig is what one run of the suite does.
type chaosConfig struct {
	duration time.Duration // faults are injected until then, after one of each kind
	seed     uint64
	perNode  int  // sockets each node's clients aim to hold
	cluster  bool // a 3-master Redis Cluster instead of one Redis
}

// chaosSettings reads the run's settings: a short run by default (skipped
// under -short), the long one with HC_CHAOS=1 (make chaos); CHAOS_DURATION
// and CHAOS_SEED override either, HC_CHAOS_CLUSTER=1 (make chaos
// CLUSTER=1) runs either against a Redis Cluster.
func chaosSettings(t *testing.T) chaosConfig {
	cfg := chaosConfig{duration: chaosShortDuration, seed: chaosShortSeed, perNode: chaosShortPerNode}
	if os.Getenv("HC_CHAOS") == "1" {
		cfg = chaosConfig{duration: chaosLongDuration, seed: uint64(time.Now().UnixNano()), perNode: chaosLongPerNode}
	} else if testing.Short() {
		t.Skip("chaos suite: skipped in -short (HC_CHAOS=1 or make chaos runs the long version)")
	}
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a positive duration", v)
		}
		cfg.duration = d
	}
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an unsigned integer", v)
		}
		cfg.seed = s
	}
	cfg.cluster = os.Getenv("HC_CHAOS_CLUSTER") == "1"
	return cfg
}

// chaosFault is one kind of fault the suite injects.
type chaosFault struct {
	name    string
	run     func()
	single  string // why it is skipped on a Redis Cluster ("" runs there)
	cluster bool   // Redis Cluster only
}

// TestChaos runs the cluster as real processes under a churning client
// load and injects faults, every kind once in a seeded random order and
// then seeded random ones until the duration is up, asserting after each
// that the counts in Redis equal the truth the clients hold. By default it
// is a short run (about 30 s of faults, fixed seed); HC_CHAOS=1 (make
// chaos) runs the long one (CHAOS_DURATION, default 2m; CHAOS_SEED), and
// HC_CHAOS_CLUSTER=1 runs against a 3-master Redis Cluster.
func TestChaos(t *testing.T) {
	t.Parallel() // its own Redis and processes; it waits more than it computes
	runChaos(t, chaosSettings(t))
}

// TestChaosCluster is the short run against a 3-master Redis Cluster, with
// slot migrations of the app under load, so make test covers both modes.
// make chaos (HC_CHAOS=1) runs only TestChaos, in the mode CLUSTER picks.
func TestChaosCluster(t *testing.T) {
	if os.Getenv("HC_CHAOS") == "1" {
		t.Skip("make chaos runs TestChaos; CLUSTER=1 picks a Redis Cluster")
	}
	t.Parallel()
	cfg := chaosSettings(t)
	cfg.cluster = true
	runChaos(t, cfg)
}

func runChaos(t *testing.T, cfg chaosConfig) {
	mode := "single Redis"
	if cfg.cluster {
		mode = "3-master Redis Cluster"
	}
	t.Logf("chaos: %s, duration %v, seed %d (rerun with CHAOS_SEED=%d), %d sockets per node", mode, cfg.duration, cfg.seed, cfg.seed, cfg.perNode)

	setup := time.Now()
	c := &chaos{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0x6368616f73)),
		stats: map[string]*faultStats{}, socks: map[*chaosSock]struct{}{}}
	if cfg.cluster {
		c.cluster = redistest.NewCluster(t)
		c.common = []string{"--redis-cluster", c.cluster.Seeds()}
		c.store = counts.NewStore(c.cluster.Client(t), keyspace.Space{})
		for _, n := range c.cluster.Nodes {
			c.masters = append(c.masters, n.Client(t))
		}
	} else {
		c.srv = redistest.New(t)
		c.common = []string{"--redis", c.srv.URL()}
		c.store = counts.NewStore(c.srv.Client(t), keyspace.Space{})
	}
	// Reaps, audits and republishes in slices of 2 fields: every one of
	// them takes many atomic units, so the faults land between slices.
	c.common = append(c.common, "--slice-size", strconv.Itoa(chaosSliceSize))
	c.store.SliceSize = chaosSliceSize
	common := c.common

	for i := range chaosNodes {
		s := &chaosSlot{name: fmt.Sprintf("ws-%d", i)}
		if c.srv != nil {
			// Each node reaches Redis through a proxy of its own, to be
			// partitioned alone.
			s.proxy = redistest.NewProxy(t, c.srv.Addr)
		}
		s.n = startWSNode(t, s.name, c.nodeFlags(s)...)
		waitReady(t, s.n.p, s.n.admin)
		s.state = slotUp
		c.slots = append(c.slots, s)
	}
	for i := range 2 {
		cl := startCleaner(t, fmt.Sprintf("cleaner-%d", i+1), common...)
		waitReady(t, cl.p, cl.admin)
		c.cleaners = append(c.cleaners, cl)
		c.cleanerLogs = append(c.cleanerLogs, cl.p.log)
	}
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(slices.Clone(common), "--addr", api.addr, "--admin-addr", api.admin)...)
	waitReady(t, api.p, api.admin)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stopChurn := sync.OnceFunc(func() { cancel(); wg.Wait() })
	// Also on the way out of a failed test: registered after the first
	// processes, it runs before their cleanup (not before that of nodes
	// restarted later, hence the explicit call below).
	t.Cleanup(func() {
		stopChurn()
		c.closeAll()
	})
	for _, s := range c.slots {
		wg.Add(1)
		go func() { defer wg.Done(); c.churn(ctx, s) }()
	}

	// Fill up, then require exact counts before the first fault.
	deadline := time.Now().Add(60 * time.Second)
	for c.total() < chaosNodes*cfg.perNode*9/10 {
		if time.Now().After(deadline) {
			t.Fatalf("chaos: only %d sockets after 60s", c.total())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.check("baseline", time.Now(), 10*time.Second, nil)
	t.Logf("chaos: cluster up and filled in %v", time.Since(setup).Round(time.Millisecond))

	var faults []chaosFault
	for _, f := range []chaosFault{
		{name: "wsnode SIGKILL", run: c.killNode},
		{name: "wsnode SIGSTOP/CONT", run: c.pauseNode},
		{name: "redis restart empty", run: c.restartRedis, single: "a master restarted empty loses its slot assignment; the single-Redis run covers data loss"},
		{name: "cleaner SIGKILL/STOP", run: c.cleanerFault},
		{name: "wsnode partitioned from redis", run: c.partitionNode, single: "the proxies front one Redis; cluster clients learn the masters' own addresses"},
		{name: "2 cleaners without lease", run: c.leaselessCleaners},
		{name: "app slot migration", run: c.migrateAppSlot, cluster: true},
	} {
		switch {
		case cfg.cluster && f.single != "":
			c.skipped = append(c.skipped, [2]string{f.name, "skipped on a Redis Cluster: " + f.single})
		case !cfg.cluster && f.cluster:
			c.skipped = append(c.skipped, [2]string{f.name, "Redis Cluster only (HC_CHAOS_CLUSTER=1, make chaos CLUSTER=1)"})
		default:
			faults = append(faults, f)
		}
	}
	// Every kind once first, so even a short run covers them all.
	var plan []chaosFault
	for _, i := range c.rng.Perm(len(faults)) {
		plan = append(plan, faults[i])
	}
	began := time.Now()
	for n := 0; n < len(plan) || time.Since(began) < cfg.duration; n++ {
		f := faults[c.rng.IntN(len(faults))]
		if n < len(plan) {
			f = plan[n]
		}
		c.waitFilled()
		t.Logf("chaos: t+%v injecting %s (%d sockets: %v per node)", time.Since(began).Round(time.Millisecond), f.name, c.total(), c.perSlot())
		f.run()
		// Between faults: the cluster must be (and stay) exact.
		c.check("between faults", time.Now(), 5*time.Second, nil)
	}

	stopChurn()
	// Final word: the operator's audit command agrees.
	out, err := exec.Command(filepath.Join(binaries(t), "cleaner"), append(slices.Clone(common), "audit")...).CombinedOutput()
	if err != nil {
		c.violation("final", fmt.Sprintf("`cleaner audit` failed: %v\n%s", err, out))
	}
	c.report()
	c.livenessReport()
	t.Logf("chaos: faults done after %v", time.Since(began).Round(time.Millisecond))
}

type slotState int

const (
	slotUp slotState = iota
	slotPaused
	slotDown
	slotPartitioned // up, but its Redis connection is cut
)

// chaosSlot is one wsnode position: the process there now and its state.
type chaosSlot struct {
	name  string
	proxy *redistest.Proxy // between the node and Redis; nil on a Redis Cluster
	n     node             // written under chaos.mu; the fault goroutine may read it without
	state slotState        // guarded by chaos.mu
}

// chaosSock is one client socket; its confirmed subscriptions are the truth.
type chaosSock struct {
	c      *wsclient.Conn
	slot   *chaosSlot
	id     string // socket_id, set before the socket joins the truth
	user   string
	wmu    sync.Mutex
	subs   map[string]bool // confirmed, guarded by chaos.mu
	closed bool            // guarded by chaos.mu
	est    chan string     // socket_id
	acks   chan string     // channel subscribed, or "!error"
	gone   chan struct{}   // closed when the socket is dropped
}

type faultStats struct {
	times      []time.Duration
	violations int
	unverified int // exact at the first look, but that look came after the bound
}

type chaos struct {
	t        *testing.T
	cfg      chaosConfig
	srv      *redistest.Server  // single mode
	cluster  *redistest.Cluster // cluster mode
	masters  []*redis.Client    // cluster mode: one client per master
	common   []string
	rng      *rand.Rand
	store    *counts.Store
	slots    []*chaosSlot
	cleaners []node

	// gate: churn operations hold it shared; fault injection and each
	// comparison hold it exclusively, so no client operation is half done
	// when the truth is read or a process is stopped.
	gate sync.RWMutex

	mu         sync.Mutex
	socks      map[*chaosSock]struct{}
	lastChange time.Time
	stats      map[string]*faultStats
	order      []string
	problems   []string
	skipped    [][2]string // fault kind, why

	// For the liveness report: every cleaner's log, and each wsnode slot's
	// states over time (the first is slotUp at start).
	cleanerLogs []string
	history     map[string][]stateChange
}

type stateChange struct {
	at    time.Time
	state slotState
}

func (c *chaos) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.socks)
}

// waitFilled waits until every node that is up holds nearly its share of
// sockets again, so that each fault hits nodes with state to lose (a node
// restarted a moment ago holds none, and killing it proves nothing).
func (c *chaos) waitFilled() {
	want := c.cfg.perNode * 9 / 10
	full := func() bool {
		n := c.perSlot()
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, s := range c.slots {
			if s.state == slotUp && n[i] < want {
				return false
			}
		}
		return true
	}
	if !c.poll(15*time.Second, full) {
		c.violation("refill", fmt.Sprintf("nodes hold %v sockets 15s on, want %d each: they do not accept sockets", c.perSlot(), want))
	}
}

// perSlot is how many sockets each slot holds, in slot order.
func (c *chaos) perSlot() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := make([]int, len(c.slots))
	for s := range c.socks {
		n[slices.Index(c.slots, s.slot)]++
	}
	return n
}

func (c *chaos) closeAll() {
	c.mu.Lock()
	all := slices.Collect(maps.Keys(c.socks))
	c.mu.Unlock()
	for _, s := range all {
		s.c.Close()
	}
}

// drop removes s from the truth (closed by us or by the server).
func (c *chaos) drop(s *chaosSock) {
	c.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.gone)
		delete(c.socks, s)
		c.lastChange = time.Now()
	}
	c.mu.Unlock()
	s.c.Close()
}

func (s *chaosSock) send(msg string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.c.SetWriteDeadline(time.Now().Add(chaosOpTimeout))
	return s.c.Send(msg)
}

// read drains s until it is closed, answering pings and passing on the
// connection's socket id and subscription acknowledgements.
func (c *chaos) read(s *chaosSock) {
	defer c.drop(s)
	for {
		p, err := s.c.Read(0)
		if err != nil {
			return
		}
		var m struct {
			Event   string          `json:"event"`
			Channel string          `json:"channel"`
			Data    json.RawMessage `json:"data"`
		}
		if json.Unmarshal([]byte(p), &m) != nil {
			return // a close frame: the server is closing us
		}
		switch m.Event {
		case "pusher:connection_established":
			var raw string
			_ = json.Unmarshal(m.Data, &raw)
			var d struct {
				SocketID string `json:"socket_id"`
			}
			_ = json.Unmarshal([]byte(raw), &d)
			select {
			case s.est <- d.SocketID:
			default:
			}
		case "pusher_internal:subscription_succeeded":
			select {
			case s.acks <- m.Channel:
			default:
			}
		case "pusher:error", "pusher:subscription_error":
			select {
			case s.acks <- "!" + string(m.Data):
			default:
			}
		case "pusher:ping":
			_ = s.send(`{"event":"pusher:pong","data":{}}`)
		}
	}
}

// churn keeps about cfg.perNode sockets on slot, opening, closing and
// re-subscribing a few per second, skipping the node while it is down or
// paused. A partitioned node gets public channels only: a presence
// subscription reads Redis, and waiting out its timeout would hold the
// gate for seconds.
func (c *chaos) churn(ctx context.Context, slot *chaosSlot) {
	rng := rand.New(rand.NewPCG(c.cfg.seed, uint64(len(slot.name))*7919+uint64(slot.name[len(slot.name)-1])))
	perNode := c.cfg.perNode
	for ctx.Err() == nil {
		c.gate.RLock()
		c.mu.Lock()
		state, addr := slot.state, slot.n.addr
		var mine []*chaosSock
		for s := range c.socks {
			if s.slot == slot {
				mine = append(mine, s)
			}
		}
		c.mu.Unlock()
		// Map order is random but not seeded: sort for repeatability.
		sort.Slice(mine, func(i, j int) bool { return mine[i].user < mine[j].user })
		pause := time.Duration(150+rng.IntN(300)) * time.Millisecond
		if state == slotUp || state == slotPartitioned {
			presence := state == slotUp
			switch r := rng.IntN(10); {
			case len(mine) < perNode*9/10:
				for range min(10, perNode-len(mine)) {
					c.open(slot, addr, rng, presence)
				}
				pause = 20 * time.Millisecond
			case r < 4 && len(mine) > 0:
				c.drop(mine[rng.IntN(len(mine))])
			case r < 6 && len(mine) > 0:
				c.resubscribe(mine[rng.IntN(len(mine))], rng)
			case len(mine) < perNode+perNode/10:
				c.open(slot, addr, rng, presence)
			}
		}
		c.gate.RUnlock()
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// open dials one socket and subscribes it to a few channels (sometimes a
// presence one too, if presence), adding each subscription to the truth
// once the server acknowledged it. It reports whether every subscription
// was.
func (c *chaos) open(slot *chaosSlot, addr string, rng *rand.Rand, presence bool) bool {
	s := c.dial(slot, addr, rng)
	if s == nil {
		return false
	}
	ok := true
	for range 1 + rng.IntN(3) {
		ok = c.subscribe(s, s.id, chaosPublic[rng.IntN(len(chaosPublic))]) && ok
	}
	if presence && rng.IntN(10) < 3 {
		ok = c.subscribe(s, s.id, chaosPresence[rng.IntN(len(chaosPresence))]) && ok
	}
	return ok
}

// dial opens one socket on slot, as one of 20 users, and adds it to the
// truth once the server established it; nil if it did not.
func (c *chaos) dial(slot *chaosSlot, addr string, rng *rand.Rand) *chaosSock {
	conn, err := wsclient.Dial(addr, "/app/app-key?protocol=7")
	if err != nil {
		c.t.Logf("chaos: dial %s: %v", slot.name, err)
		return nil
	}
	s := &chaosSock{c: conn, slot: slot, user: fmt.Sprintf("u%d", rng.IntN(20)), subs: map[string]bool{},
		est: make(chan string, 1), acks: make(chan string, 4), gone: make(chan struct{})}
	go c.read(s)
	select {
	case s.id = <-s.est:
	case <-s.gone:
		return nil
	case <-time.After(chaosOpTimeout):
		c.t.Logf("chaos: %s: no connection_established within %v", slot.name, chaosOpTimeout)
		s.c.Close()
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.closed {
		return nil
	}
	c.socks[s] = struct{}{}
	c.lastChange = time.Now()
	return s
}

// subscribe reports whether s holds channel afterwards.
func (c *chaos) subscribe(s *chaosSock, socketID, channel string) bool {
	c.mu.Lock()
	held, closed := s.subs[channel], s.closed
	c.mu.Unlock()
	if held || closed {
		return held && !closed
	}
	data := map[string]string{"channel": channel}
	switch {
	case strings.HasPrefix(channel, "presence-"):
		cd := fmt.Sprintf(`{"user_id":%q,"user_info":{"name":%q}}`, s.user, s.user)
		data["channel_data"] = cd
		data["auth"] = "app-key:" + auth.Sign("app-secret", socketID+":"+channel+":"+cd)
	case strings.HasPrefix(channel, "private-"):
		data["auth"] = "app-key:" + auth.Sign("app-secret", socketID+":"+channel)
	}
	b, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": data})
	if err := s.send(string(b)); err != nil {
		c.drop(s)
		return false
	}
	sent := time.Now()
	select {
	case got := <-s.acks:
		if d := time.Since(sent); d > time.Second {
			c.t.Logf("chaos: %s on %s answered %.60q after %v", channel, s.slot.name, got, d.Round(time.Millisecond))
		}
		if got != channel {
			c.t.Logf("chaos: subscribe %s answered %q; dropping the socket", channel, got)
			c.drop(s)
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if !s.closed {
			s.subs[channel] = true
			c.lastChange = time.Now()
		}
		return !s.closed
	case <-s.gone:
		return false
	case <-time.After(chaosOpTimeout):
		// Unknown whether the server counted it: drop the socket so the
		// truth is certain again.
		c.t.Logf("chaos: %s on %s: no subscription_succeeded within %v; dropping the socket", channel, s.slot.name, chaosOpTimeout)
		c.drop(s)
		return false
	}
}

// resubscribe unsubscribes s from one channel, or subscribes it to one more.
func (c *chaos) resubscribe(s *chaosSock, rng *rand.Rand) {
	c.mu.Lock()
	subs := slices.Sorted(maps.Keys(s.subs))
	c.mu.Unlock()
	if len(subs) > 0 && rng.IntN(2) == 0 {
		ch := subs[rng.IntN(len(subs))]
		c.mu.Lock()
		delete(s.subs, ch)
		c.lastChange = time.Now()
		c.mu.Unlock()
		if err := s.send(fmt.Sprintf(`{"event":"pusher:unsubscribe","data":{"channel":%q}}`, ch)); err != nil {
			c.drop(s)
		}
		return
	}
	// A socket id is needed to sign presence; public channels only here.
	c.subscribe(s, "", chaosPublic[rng.IntN(len(chaosPublic))])
}

// truth is what the clients hold: subscriptions per channel, distinct
// users per presence channel, open sockets. Sockets on excluded slots are
// left out. Call with c.mu held.
func (c *chaos) truth(exclude *chaosSlot) (chans map[string]int64, users map[string]int64, conns int64) {
	chans, users = map[string]int64{}, map[string]int64{}
	members := map[string]map[string]bool{}
	for s := range c.socks {
		if s.slot == exclude {
			continue
		}
		conns++
		for ch := range s.subs {
			chans[ch]++
			if strings.HasPrefix(ch, "presence-") {
				if members[ch] == nil {
					members[ch] = map[string]bool{}
				}
				members[ch][s.user] = true
			}
		}
	}
	for ch, m := range members {
		users[ch] = int64(len(m))
	}
	return chans, users, conns
}

// compare reads Redis once, with churn held off and settled, and returns
// what differs from the truth ("" when exact).
func (c *chaos) compare(exclude *chaosSlot) (string, time.Time) {
	c.gate.Lock()
	defer c.gate.Unlock()
	for range 20 {
		c.mu.Lock()
		wait := chaosSettle - time.Since(c.lastChange)
		c.mu.Unlock()
		if wait <= 0 {
			break
		}
		time.Sleep(wait)
	}
	c.mu.Lock()
	wantCh, wantUsers, wantConns := c.truth(exclude)
	c.mu.Unlock()
	at := time.Now() // the truth's instant; Redis is read right after

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var diffs []string
	got, err := c.store.Channels(ctx, chaosApp, "")
	if err != nil {
		return "read channels: " + err.Error(), at
	}
	for _, ch := range slices.Sorted(maps.Keys(merge(got, wantCh))) {
		switch g, w := got[ch], wantCh[ch]; {
		case g < 0:
			diffs = append(diffs, fmt.Sprintf("%s negative %d", ch, g))
		case w == 0 && g != 0:
			diffs = append(diffs, fmt.Sprintf("%s vacated but listed with %d", ch, g))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s count %d, truth %d", ch, g, w))
		}
	}
	// Every presence channel held or listed, and the suite's own.
	presence := slices.Clone(chaosPresence)
	for ch := range merge(got, wantCh) {
		if strings.HasPrefix(ch, "presence-") && !slices.Contains(presence, ch) {
			presence = append(presence, ch)
		}
	}
	gotUsers, err := c.store.UserCounts(ctx, chaosApp, presence)
	if err != nil {
		return "read user counts: " + err.Error(), at
	}
	for _, ch := range presence {
		if gotUsers[ch] != wantUsers[ch] {
			diffs = append(diffs, fmt.Sprintf("%s user_count %d, truth %d", ch, gotUsers[ch], wantUsers[ch]))
		}
	}
	conns, err := c.store.Connections(ctx, chaosApp)
	if err != nil {
		return "read connections: " + err.Error(), at
	}
	if conns != wantConns {
		diffs = append(diffs, fmt.Sprintf("connections %d, truth %d", conns, wantConns))
	}
	drift, err := c.store.Audit(ctx, chaosApp)
	if err != nil {
		return "audit: " + err.Error(), at
	}
	for i, d := range drift.Diffs {
		if i == 5 {
			diffs = append(diffs, fmt.Sprintf("audit: %d more", len(drift.Diffs)-i))
			break
		}
		diffs = append(diffs, fmt.Sprintf("audit: %s %s %s%s want %d have %d present %v", d.Kind, d.Channel, d.User, d.Node, d.Want, d.Have, d.Present))
	}
	return strings.Join(diffs, "; "), at
}

func merge(a, b map[string]int64) map[string]int64 {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

// check polls until the counts equal the truth, recording the time from
// since under fault, and a violation if that takes longer than bound.
func (c *chaos) check(fault string, since time.Time, bound time.Duration, exclude *chaosSlot) {
	deadline := since.Add(bound)
	for {
		diff, at := c.compare(exclude)
		if diff == "" {
			if at.After(deadline) {
				// No look was possible before the bound (a client
				// operation held the gate): exact, but not shown in time.
				c.statsOf(fault)
				c.mu.Lock()
				c.stats[fault].unverified++
				c.mu.Unlock()
				c.t.Logf("chaos: %s: first look after the %v bound (at %v) found it exact", fault, bound, at.Sub(since).Round(time.Millisecond))
			}
			c.record(fault, at.Sub(since))
			return
		}
		if at.After(deadline) {
			c.violation(fault, fmt.Sprintf("not exact within %v (looked at +%v): %s", bound, at.Sub(since).Round(time.Millisecond), diff))
			c.repairDrift()
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// repairDrift fixes what the audit finds after a violation, as an operator
// would with `cleaner audit --repair`, so that later faults are judged on
// their own instead of all failing for one cause.
func (c *chaos) repairDrift() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	drift, err := c.store.Audit(ctx, chaosApp)
	if err == nil && drift.Found() {
		n, err := c.store.Repair(ctx, chaosApp, drift)
		c.t.Logf("chaos: repaired %d drifting entries (error: %v) so later faults are judged on their own", n, err)
	}
}

func (c *chaos) statsOf(fault string) *faultStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats[fault]
	if st == nil {
		st = &faultStats{}
		c.stats[fault] = st
		c.order = append(c.order, fault)
	}
	return st
}

func (c *chaos) record(fault string, d time.Duration) {
	st := c.statsOf(fault)
	c.mu.Lock()
	st.times = append(st.times, d)
	c.mu.Unlock()
	c.t.Logf("chaos: %s exact after %v", fault, d.Round(time.Millisecond))
}

// fatal records a violation after which the run cannot go on, prints the
// table and stops the test.
func (c *chaos) fatal(fault, what string) {
	c.violation(fault, what)
	c.report()
	c.t.FailNow()
}

func (c *chaos) violation(fault, what string) {
	st := c.statsOf(fault)
	c.mu.Lock()
	st.violations++
	c.problems = append(c.problems, fault+": "+what)
	c.mu.Unlock()
	c.t.Errorf("chaos VIOLATION %s: %s", fault, what)
}

func (c *chaos) report() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-46s %6s %10s %10s %10s %10s\n", "fault", "count", "max", "p50", "violations", "late look")
	for _, f := range c.order {
		st := c.stats[f]
		ts := slices.Clone(st.times)
		slices.Sort(ts)
		var mx, p50 time.Duration
		if len(ts) > 0 {
			mx, p50 = ts[len(ts)-1], ts[len(ts)/2]
		}
		fmt.Fprintf(&b, "%-46s %6d %10v %10v %10d %10d\n", f, len(ts)+st.violations, mx.Round(time.Millisecond), p50.Round(time.Millisecond), st.violations, st.unverified)
	}
	for _, s := range c.skipped {
		fmt.Fprintf(&b, "%-46s %6s   %s\n", s[0], "-", s[1])
	}
	for _, p := range c.problems {
		fmt.Fprintf(&b, "VIOLATION %s\n", p)
	}
	c.t.Log(b.String())
}
