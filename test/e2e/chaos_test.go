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
	"syscall"
	"testing"
	"time"

	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/redisx/redistest"
	"github.com/headcount/headcount/pkg/wstest"
)

// Chaos suite constants. The cluster runs with the suite's heartbeat,
// dead-after, scan interval and lease TTL (cluster_test.go).
const (
	chaosApp       = "app-id"
	chaosNodes     = 3
	chaosPerNode   = 100               // sockets each node's clients aim to hold
	chaosMaxSocks  = chaosPerNode + 10 // hard cap per node
	chaosSlack     = time.Second       // measurement and scheduling slack on every bound
	chaosSettle    = 150 * time.Millisecond
	chaosOpTimeout = 6 * time.Second // above the wsnode's 5 s Redis timeout on a presence subscribe
)

var (
	chaosPublic   = []string{"chaos-0", "chaos-1", "chaos-2", "chaos-3", "chaos-4", "chaos-5"}
	chaosPresence = []string{"presence-chaos-0", "presence-chaos-1", "presence-chaos-2"}
)

// TestChaos runs the cluster as real processes under a churning client
// load and injects faults in a seeded random order, asserting after each
// that the counts in Redis equal the truth the clients hold. It runs only
// with HC_CHAOS=1 (make chaos); CHAOS_DURATION (default 2m) and CHAOS_SEED
// tune it.
func TestChaos(t *testing.T) {
	if os.Getenv("HC_CHAOS") != "1" {
		t.Skip("chaos suite: set HC_CHAOS=1 (make chaos)")
	}
	duration := 2 * time.Minute
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a positive duration", v)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an unsigned integer", v)
		}
		seed = s
	}
	t.Logf("chaos: duration %v, seed %d (rerun with CHAOS_SEED=%d)", duration, seed, seed)

	srv := redistest.New(t)
	common := []string{"--redis", srv.URL()}
	c := &chaos{t: t, srv: srv, common: common, rng: rand.New(rand.NewPCG(seed, 0x6368616f73)),
		store: counts.NewStore(srv.Client(t)), stats: map[string]*faultStats{}, socks: map[*chaosSock]struct{}{}}

	for i := range chaosNodes {
		s := &chaosSlot{name: fmt.Sprintf("ws-%d", i)}
		s.n = startWSNode(t, s.name, common...)
		waitReady(t, s.n.p, s.n.admin)
		s.state = slotUp
		c.slots = append(c.slots, s)
	}
	for i := range 2 {
		cl := startCleaner(t, fmt.Sprintf("cleaner-%d", i+1), common...)
		waitReady(t, cl.p, cl.admin)
		c.cleaners = append(c.cleaners, cl)
	}
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(slices.Clone(common), "--addr", api.addr, "--admin-addr", api.admin)...)
	waitReady(t, api.p, api.admin)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		c.closeAll()
	})
	for _, s := range c.slots {
		wg.Add(1)
		go func() { defer wg.Done(); c.churn(ctx, s, seed) }()
	}

	// Fill up, then require exact counts before the first fault.
	deadline := time.Now().Add(60 * time.Second)
	for c.total() < chaosNodes*chaosPerNode*9/10 {
		if time.Now().After(deadline) {
			t.Fatalf("chaos: only %d sockets after 60s", c.total())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.check("baseline", time.Now(), 10*time.Second, nil)

	faults := []struct {
		name string
		run  func()
	}{
		{"wsnode SIGKILL", c.killNode},
		{"wsnode SIGSTOP/CONT", c.pauseNode},
		{"redis restart empty", c.restartRedis},
		{"cleaner SIGKILL/STOP", c.cleanerFault},
	}
	began := time.Now()
	for time.Since(began) < duration {
		f := faults[c.rng.IntN(len(faults))]
		t.Logf("chaos: t+%v injecting %s (%d sockets)", time.Since(began).Round(time.Millisecond), f.name, c.total())
		f.run()
		// Between faults: the cluster must be (and stay) exact.
		c.check("between faults", time.Now(), 5*time.Second, nil)
	}

	// Final word: the operator's audit command agrees.
	out, err := exec.Command(filepath.Join(binaries(t), "cleaner"), "--redis", srv.URL(), "audit").CombinedOutput()
	if err != nil {
		c.violation("final", fmt.Sprintf("`cleaner audit` failed: %v\n%s", err, out))
	}
	c.report()
}

type slotState int

const (
	slotUp slotState = iota
	slotPaused
	slotDown
)

// chaosSlot is one wsnode position: the process there now and its state.
type chaosSlot struct {
	name  string
	n     node
	state slotState // guarded by chaos.mu
}

// chaosSock is one client socket; its confirmed subscriptions are the truth.
type chaosSock struct {
	c      *wstest.Conn
	slot   *chaosSlot
	user   string
	wmu    sync.Mutex
	subs   map[string]bool // confirmed, guarded by chaos.mu
	closed bool            // guarded by chaos.mu
	est    chan string     // socket_id
	acks   chan string     // channel subscribed, or "!error"
}

type faultStats struct {
	times      []time.Duration
	violations int
	unverified int // exact at the first look, but that look came after the bound
}

type chaos struct {
	t        *testing.T
	srv      *redistest.Server
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
}

func (c *chaos) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.socks)
}

func (c *chaos) closeAll() {
	c.mu.Lock()
	all := slices.Collect(maps.Keys(c.socks))
	c.mu.Unlock()
	for _, s := range all {
		s.c.Close()
	}
}

func (c *chaos) changed() {
	c.mu.Lock()
	c.lastChange = time.Now()
	c.mu.Unlock()
}

// drop removes s from the truth (closed by us or by the server).
func (c *chaos) drop(s *chaosSock) {
	c.mu.Lock()
	if !s.closed {
		s.closed = true
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

// churn keeps about chaosPerNode sockets on slot, opening, closing and
// re-subscribing a few per second, skipping the node while it is down or
// paused.
func (c *chaos) churn(ctx context.Context, slot *chaosSlot, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(len(slot.name))*7919+uint64(slot.name[len(slot.name)-1])))
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
		if state == slotUp {
			switch r := rng.IntN(10); {
			case len(mine) < chaosPerNode*9/10:
				for range min(10, chaosPerNode-len(mine)) {
					c.open(slot, addr, rng)
				}
				pause = 20 * time.Millisecond
			case r < 4 && len(mine) > 0:
				c.drop(mine[rng.IntN(len(mine))])
			case r < 6 && len(mine) > 0:
				c.resubscribe(mine[rng.IntN(len(mine))], rng)
			case len(mine) < chaosMaxSocks:
				c.open(slot, addr, rng)
			}
		}
		c.gate.RUnlock()
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// open dials one socket and subscribes it to a few channels, adding each
// subscription to the truth once the server acknowledged it.
func (c *chaos) open(slot *chaosSlot, addr string, rng *rand.Rand) {
	conn, err := wstest.Dial(addr, "/app/app-key?protocol=7")
	if err != nil {
		return
	}
	s := &chaosSock{c: conn, slot: slot, user: fmt.Sprintf("u%d", rng.IntN(20)), subs: map[string]bool{},
		est: make(chan string, 1), acks: make(chan string, 4)}
	go c.read(s)
	var id string
	select {
	case id = <-s.est:
	case <-time.After(chaosOpTimeout):
		c.t.Logf("chaos: %s: no connection_established within %v", slot.name, chaosOpTimeout)
		s.c.Close()
		return
	}
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return
	}
	c.socks[s] = struct{}{}
	c.lastChange = time.Now()
	c.mu.Unlock()
	for range 1 + rng.IntN(3) {
		c.subscribe(s, id, chaosPublic[rng.IntN(len(chaosPublic))])
	}
	if rng.IntN(10) < 3 {
		c.subscribe(s, id, chaosPresence[rng.IntN(len(chaosPresence))])
	}
}

func (c *chaos) subscribe(s *chaosSock, socketID, channel string) {
	c.mu.Lock()
	already := s.subs[channel] || s.closed
	c.mu.Unlock()
	if already {
		return
	}
	data := map[string]string{"channel": channel}
	if strings.HasPrefix(channel, "presence-") {
		cd := fmt.Sprintf(`{"user_id":%q,"user_info":{"name":%q}}`, s.user, s.user)
		data["channel_data"] = cd
		data["auth"] = "app-key:" + auth.Sign("app-secret", socketID+":"+channel+":"+cd)
	}
	b, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": data})
	if err := s.send(string(b)); err != nil {
		c.drop(s)
		return
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
			return
		}
		c.mu.Lock()
		if !s.closed {
			s.subs[channel] = true
			c.lastChange = time.Now()
		}
		c.mu.Unlock()
	case <-time.After(chaosOpTimeout):
		// Unknown whether the server counted it: drop the socket so the
		// truth is certain again.
		c.t.Logf("chaos: %s on %s: no subscription_succeeded within %v; dropping the socket", channel, s.slot.name, chaosOpTimeout)
		c.drop(s)
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
	at := time.Now()
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
	at = time.Now() // the truth's instant; Redis is read right after

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
	gotUsers, err := c.store.UserCounts(ctx, chaosApp, chaosPresence)
	if err != nil {
		return "read user counts: " + err.Error(), at
	}
	for _, ch := range chaosPresence {
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
			return
		}
		time.Sleep(25 * time.Millisecond)
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

func (c *chaos) violation(fault, what string) {
	st := c.statsOf(fault)
	c.mu.Lock()
	st.violations++
	c.problems = append(c.problems, fault+": "+what)
	c.mu.Unlock()
	c.t.Errorf("chaos VIOLATION %s: %s", fault, what)
}

// pick returns a random slot that is up, or nil.
func (c *chaos) pickUp() *chaosSlot {
	var up []*chaosSlot
	c.mu.Lock()
	for _, s := range c.slots {
		if s.state == slotUp {
			up = append(up, s)
		}
	}
	c.mu.Unlock()
	if len(up) == 0 {
		return nil
	}
	return up[c.rng.IntN(len(up))]
}

func (c *chaos) setState(s *chaosSlot, st slotState) {
	c.mu.Lock()
	s.state = st
	c.lastChange = time.Now()
	c.mu.Unlock()
}

// killNode: SIGKILL a wsnode; its counts go within dead-after + scan
// interval; a replacement with the same node id starts after.
func (c *chaos) killNode() {
	s := c.pickUp()
	if s == nil {
		return
	}
	c.gate.Lock()
	c.setState(s, slotDown)
	s.n.p.kill(c.t)
	c.gate.Unlock()
	killed := time.Now()
	c.check("wsnode SIGKILL", killed, deadAfter+scanInterval+heartbeat+chaosSlack, nil)
	s.n = startWSNode(c.t, s.name, c.common...)
	waitReady(c.t, s.n.p, s.n.admin)
	c.setState(s, slotUp)
}

// pauseNode: SIGSTOP a wsnode until it is reaped, then SIGCONT: it must
// notice and republish within one heartbeat.
func (c *chaos) pauseNode() {
	s := c.pickUp()
	if s == nil {
		return
	}
	c.gate.Lock()
	c.setState(s, slotPaused)
	s.n.p.signal(syscall.SIGSTOP)
	c.gate.Unlock()
	stopped := time.Now()
	// While paused and reaped, the global holds the other nodes only.
	c.check("wsnode SIGSTOP: reaped", stopped, deadAfter+scanInterval+heartbeat+chaosSlack, s)
	c.gate.Lock()
	s.n.p.signal(syscall.SIGCONT)
	c.setState(s, slotUp)
	c.gate.Unlock()
	c.check("wsnode SIGCONT: republished", time.Now(), heartbeat+chaosSlack, nil)
}

// restartRedis: Redis restarted empty; every node republishes within two
// heartbeats.
func (c *chaos) restartRedis() {
	c.gate.Lock()
	c.srv.Restart(c.t)
	c.gate.Unlock()
	c.check("redis restart empty", time.Now(), 2*heartbeat+chaosSlack, nil)
}

func (c *chaos) activeCleaner(within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		for i, cl := range c.cleaners {
			if metric(cl.admin, "headcount_cleaner_active") == 1 {
				return i
			}
		}
		if time.Now().After(deadline) {
			return -1
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// cleanerFault: SIGKILL or SIGSTOP the active cleaner, with a wsnode
// SIGKILLed at the same moment so only a cleaner can fix the counts: the
// passive cleaner takes over within one lease TTL and reaps.
func (c *chaos) cleanerFault() {
	i := c.activeCleaner(5 * time.Second)
	if i < 0 {
		c.violation("cleaner", "no active cleaner")
		return
	}
	cl, other := c.cleaners[i], c.cleaners[1-i]
	stop := c.rng.IntN(2) == 0
	fault := "cleaner SIGKILL + wsnode SIGKILL"
	if stop {
		fault = "cleaner SIGSTOP + wsnode SIGKILL"
	}
	s := c.pickUp()
	c.gate.Lock()
	if stop {
		cl.p.signal(syscall.SIGSTOP)
	} else {
		cl.p.kill(c.t)
	}
	if s != nil {
		c.setState(s, slotDown)
		s.n.p.kill(c.t)
	}
	c.gate.Unlock()
	at := time.Now()
	deadline := at.Add(leaseTTL + chaosSlack)
	for metric(other.admin, "headcount_cleaner_active") != 1 {
		if time.Now().After(deadline) {
			c.violation("cleaner takeover", fmt.Sprintf("passive cleaner not active within %v", leaseTTL+chaosSlack))
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if metric(other.admin, "headcount_cleaner_active") == 1 {
		c.record("cleaner takeover", time.Since(at))
	}
	c.check(fault, at, leaseTTL+deadAfter+scanInterval+heartbeat+chaosSlack, nil)
	if stop {
		cl.p.signal(syscall.SIGCONT)
		resumed := time.Now()
		deadline := resumed.Add(scanInterval + chaosSlack)
		for metric(cl.admin, "headcount_cleaner_active") != 0 || metric(other.admin, "headcount_cleaner_active") != 1 {
			if time.Now().After(deadline) {
				c.violation(fault, "resumed cleaner did not turn passive (or the other lost the lease)")
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
	} else {
		n := startCleaner(c.t, cl.p.name, c.common...)
		waitReady(c.t, n.p, n.admin)
		c.cleaners[i] = n
	}
	if s != nil {
		s.n = startWSNode(c.t, s.name, c.common...)
		waitReady(c.t, s.n.p, s.n.admin)
		c.setState(s, slotUp)
	}
}

func (c *chaos) report() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-36s %6s %10s %10s %10s\n", "fault", "count", "max", "p50", "violations")
	for _, f := range c.order {
		st := c.stats[f]
		ts := slices.Clone(st.times)
		slices.Sort(ts)
		var mx, p50 time.Duration
		if len(ts) > 0 {
			mx, p50 = ts[len(ts)-1], ts[len(ts)/2]
		}
		fmt.Fprintf(&b, "%-36s %6d %10v %10v %10d %10d\n", f, len(ts)+st.violations, mx.Round(time.Millisecond), p50.Round(time.Millisecond), st.violations, st.unverified)
	}
	for _, p := range c.problems {
		fmt.Fprintf(&b, "VIOLATION %s\n", p)
	}
	c.t.Log(b.String())
}
