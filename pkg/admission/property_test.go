package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/luascript"
)

// The property test drives random interleavings of everything that moves a
// channel's gate, as two httpapi replicas and two wsnodes make them against
// one real Redis (single and Cluster):
//
//   - check: POST .../admission (also the check-in), on either replica;
//   - join: a presence subscribe on either node: the node's gate call
//     (Join, as wsnode makes it; none when the user already has a socket
//     there), then the member recorded by that node's own
//     counts.Recorder, flushed later;
//   - leave: a socket unsubscribes (recorded, flushed later);
//   - flush: a node's recorder writes what it gathered; the leave edges it
//     reports go to that node's announcer queue;
//   - announce: queued leave edges reach the gate (Left), late, as the
//     announcer's do;
//   - delete: DELETE .../admission on either replica;
//   - state: GET .../admission (the gate settles what expired);
//   - check-in: a node checks in for its connected waiters;
//   - capacity: PUT or DELETE .../capacity;
//   - wait: Redis's clock moves on, so tickets, dropouts, graces expire.
//
// After every step one script reads every key of the channel at once and
// checks, against the snapshot before the step:
//
//   - capacity: the distinct users holding a seat (members, slot holders,
//     holds of subscriptions being recorded; expired entries a sweep has not
//     removed yet count too, which is stricter) are at most the seats (the
//     capacity, or the member limit if smaller), unless nobody got a seat in
//     the step (a lowered capacity evicts nobody);
//   - FIFO: on a channel with a capacity, nobody got a seat in the step
//     while someone who was on the list before them (lower arrival
//     sequence, or anyone for a newcomer) still waits with the same
//     sequence;
//   - GET's occupancy is the snapshot's, on a channel with a capacity;
//     if Redis's clock moved on by a grace or more in the step (the
//     machine stalled), the hold key may have expired between the GET and
//     the snapshot, so its occupancy is then only checked against the
//     seats held before or after it.
//
// It runs twice: on a channel with a capacity of 3 (admission, with its
// list) and on one with the member limit alone, 3 (first come, first
// served), which the capacity steps turn into a listed channel and back.
//
// A node records a subscription within the grace of its gate call (it
// flushes within milliseconds; the grace is at least a second). The driver
// keeps that promise by flushing a node whose oldest unrecorded join is
// half a grace old; if the machine stalls past the grace anyway, that join
// is turned into one whose sockets left before the flush (a legal history),
// never flushed late.
//
// HC_ADMISSION_SEED=n replays a seed (timing-dependent expiries aside);
// HC_ADMISSION_STEPS=n changes the steps per backend.

// propRule: short timings so tickets, dropouts and graces expire during
// the run; the grace is long enough for the driver's flushes.
var propRule = Rule{Capacity: 3, Ticket: 250 * time.Millisecond, Grace: 400 * time.Millisecond, Dropout: 300 * time.Millisecond}

// memberRule is propRule's channel without a capacity: the member limit
// alone seats 3 (and caps a capacity the steps set above it).
var memberRule = Rule{Members: 3, Ticket: propRule.Ticket, Grace: propRule.Grace, Dropout: propRule.Dropout}

// seatsOf is the oracle of scripts/lib.lua's seats: the seats of a channel
// with override (0: none) under r, and whether it keeps a waiting list.
func seatsOf(override int, r Rule) (int, bool) {
	c := r.Capacity
	if override > 0 {
		c = override
	}
	if c > 0 {
		if r.Members > 0 && r.Members < c {
			c = r.Members
		}
		return c, true
	}
	return r.Members, false
}

const propUsers = 8

func propSeed(t testing.TB) uint64 {
	if s := os.Getenv("HC_ADMISSION_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HC_ADMISSION_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

func propSteps(t testing.TB, def int) int {
	if s := os.Getenv("HC_ADMISSION_STEPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("HC_ADMISSION_STEPS=%q: %v", s, err)
		}
		return n
	}
	return def
}

// TestProperty runs the driver on a single Redis and on a 3-master
// Cluster, on a channel with a capacity and on one with the member limit
// alone.
func TestProperty(t *testing.T) {
	t.Parallel()
	steps := propSteps(t, 1200)
	for _, r := range []struct {
		name string
		rule Rule
	}{{"capacity", propRule}, {"members", memberRule}} {
		t.Run(r.name+"/single", func(t *testing.T) {
			t.Parallel() // each run has its own server
			srv := redistest.New(t)
			runProperty(t, func() redis.UniversalClient { return srv.Client(t) }, r.rule, propSeed(t), steps)
		})
		t.Run(r.name+"/cluster", func(t *testing.T) {
			t.Parallel()
			if testing.Short() {
				t.Skip("cluster in -short")
			}
			cl := redistest.NewCluster(t)
			runProperty(t, func() redis.UniversalClient { return cl.Client(t) }, r.rule, propSeed(t), steps)
		})
	}
}

// mutation brings a known bug back into one of the gate's scripts.
type mutation struct {
	name     string
	rule     Rule
	script   **luascript.Script
	old, new string
}

var mutations = []mutation{
	// The bug as reported: between the gate and the node's flush, the
	// joining member's seat is only a slot, and DELETE frees it.
	{"delete frees a joining seat", propRule, &leaveScript,
		"redis.call('ZREM', K.wait, user)\n", "redis.call('ZREM', K.wait, user)\nredis.call('ZREM', K.hold, user)\n"},
	// The gate before holds: a subscribe keeps only a slot (none for a
	// member joining on a second node, whose other sockets may leave first).
	{"a subscribe holds nothing", propRule, &joinScript, "hold(user, now + grace, grace)\nlocal reentry", "local reentry"},
	// The member limit as it was: checked against the members, not held,
	// so joins on two nodes before either flushes pass it together.
	{"a member-limit join holds nothing", memberRule, &joinScript, "  hold(user, now + grace, grace)\n  return {1, 0, 0, 0}", "  return {1, 0, 0, 0}"},
	// A member-limit join that does not count the seats held for others.
	{"the member limit counts members only", memberRule, &joinScript,
		"if occupancy() >= cap then", "if redis.call('HLEN', K.members) >= cap then"},
}

// TestPropertyCatchesMutations: with each known bug brought back, the
// property test finds a violation (a few short runs on fresh apps).
func TestPropertyCatchesMutations(t *testing.T) {
	// Not parallel: it swaps the package's scripts, which every other
	// test runs.
	srv := redistest.New(t)
	seed := propSeed(t)
	for _, m := range mutations {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			src := (*m.script).Source()
			mutated := strings.Replace(src, m.old, m.new, 1)
			if mutated == src {
				t.Fatalf("the mutation no longer applies: %q is not in the script", m.old)
			}
			saved := *m.script
			*m.script = &luascript.Script{Script: redis.NewScript(mutated)}
			t.Cleanup(func() { *m.script = saved })
			for attempt := range uint64(8) {
				s := seed + attempt
				w := newPropWorld(t, func() redis.UniversalClient { return srv.Client(t) }, m.rule, fmt.Sprintf("mut%d", attempt), "presence-prop", s)
				err := w.run(propSteps(t, 1200))
				if errors.Is(err, errProperty) {
					t.Logf("caught with seed %d (HC_ADMISSION_SEED=%d replays it): %v", s, s, err)
					return
				}
				if err != nil {
					t.Fatalf("seed %d: %v", s, err)
				}
				t.Logf("seed %d: not caught in %s", s, w.stats())
			}
			t.Fatalf("the property test never caught %q", m.name)
		})
	}
}

func runProperty(t *testing.T, client func() redis.UniversalClient, rule Rule, seed uint64, steps int) {
	t.Logf("seed %d (HC_ADMISSION_SEED=%d replays it), %d steps", seed, seed, steps)
	w := newPropWorld(t, client, rule, "app", "presence-prop", seed)
	start := time.Now()
	if err := w.run(steps); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("%d steps in %v: %s", steps, time.Since(start).Round(time.Millisecond), w.stats())
}

// propWorld is one channel's gate under two replicas and two nodes.
type propWorld struct {
	t        testing.TB
	ctx      context.Context
	app, ch  string
	rule     Rule
	rng      *rand.Rand
	replicas [2]*Gate
	nodes    [2]*propNode
	snapRDB  redis.UniversalClient
	users    []string

	last  propSnap
	step  int
	trace []string // the latest steps, for a failure's message
	count map[string]int
}

// propNode is one wsnode: its own Redis client, gate and recorder, and its
// local truth.
type propNode struct {
	id   string
	gate *Gate
	rec  *counts.Recorder
	// local: this node's sockets subscribed, by user.
	local map[string]int
	// due: users with a gated join not flushed yet -> the Redis time (ms)
	// by which the node must have flushed it.
	due map[string]int64
	// waiters: refused users on the list with a socket here.
	waiters map[string]bool
	// left: leave edges flushed and not yet announced to the gate.
	left []string
}

func newPropWorld(t testing.TB, client func() redis.UniversalClient, rule Rule, app, ch string, seed uint64) *propWorld {
	w := &propWorld{t: t, ctx: context.Background(), app: app, ch: ch, rule: rule,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), snapRDB: client(), count: map[string]int{}}
	complete(t, w.snapRDB, app)
	for i := range w.replicas {
		w.replicas[i] = New(client(), keyspace.Space{})
	}
	for i := range w.nodes {
		rdb := client()
		n := &propNode{id: fmt.Sprintf("node%d", i), gate: New(rdb, keyspace.Space{}),
			local: map[string]int{}, due: map[string]int64{}, waiters: map[string]bool{}}
		n.rec = counts.NewRecorder(rdb, n.id, counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t),
			OnFlushed: func(f counts.Edges) {
				for _, e := range f.Members {
					if !e.Added && e.Channel == ch {
						n.left = append(n.left, e.UserID)
					}
				}
			}})
		w.nodes[i] = n
	}
	for i := range propUsers {
		w.users = append(w.users, fmt.Sprint("u", i))
	}
	return w
}

func (w *propWorld) stats() string {
	keys := make([]string, 0, len(w.count))
	for k := range w.count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d, ", k, w.count[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

// run takes steps random steps, checking the snapshot after each.
func (w *propWorld) run(steps int) error {
	var err error
	if w.last, err = w.snapshot(); err != nil {
		return err
	}
	for w.step = 0; w.step < steps; w.step++ {
		if err := w.keepPromises(); err != nil {
			return err
		}
		if err := w.randomStep(); err != nil {
			return err
		}
	}
	return nil
}

// keepPromises flushes a node whose oldest unrecorded join is half a grace
// from its deadline, and turns a join the machine stalled past its
// deadline into sockets that left before the flush.
func (w *propWorld) keepPromises() error {
	margin := w.rule.Grace.Milliseconds() / 2
	for i, n := range w.nodes {
		late := false
		for u, due := range n.due {
			if due <= w.last.now {
				w.count["stalled join cancelled"]++
				w.t.Logf("step %d: %s's join on %s missed its flush (Redis time %d, due %d): cancelled", w.step, u, n.id, w.last.now, due)
				n.rec.AddMember(w.app, w.ch, u, nil, -int64(n.local[u]))
				n.rec.Add(w.app, w.ch, -int64(n.local[u]))
				delete(n.local, u)
				delete(n.due, u)
			} else if due-w.last.now < margin {
				late = true
			}
		}
		if late {
			w.count["forced flush"]++
			if err := w.flush(i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *propWorld) randomStep() error {
	r := w.rng.IntN(100)
	replica, node := w.rng.IntN(2), w.rng.IntN(2)
	switch {
	case r < 18:
		return w.check(replica, w.outsider())
	case r < 32:
		return w.join(node, w.joiner())
	case r < 52:
		return w.leave(node)
	case r < 62:
		return w.flush(node)
	case r < 70:
		return w.announce(node)
	case r < 80:
		return w.del(replica, w.user())
	case r < 85:
		return w.state(replica)
	case r < 89:
		return w.checkIn(node)
	case r < 91:
		return w.capacity(replica)
	default:
		return w.wait()
	}
}

// user picks a user: half the time one who holds a seat or whose join a
// node has not flushed (where the races are), else anyone.
func (w *propWorld) user() string {
	if w.rng.IntN(2) == 0 {
		in := w.last.occupants()
		for _, n := range w.nodes {
			for u := range n.due {
				in[u] = true
			}
		}
		if len(in) > 0 {
			l := make([]string, 0, len(in))
			for u := range in {
				l = append(l, u)
			}
			slices.Sort(l)
			return l[w.rng.IntN(len(l))]
		}
	}
	return w.users[w.rng.IntN(len(w.users))]
}

// joiner picks who subscribes: often a ticket holder who is not a member
// yet (the app admitted them), sometimes anyone holding a seat (another
// socket), else anyone (refused, unless they hold a seat).
func (w *propWorld) joiner() string {
	var tickets []string
	for u := range w.last.slots {
		if _, ok := w.last.members[u]; !ok {
			tickets = append(tickets, u)
		}
	}
	slices.Sort(tickets)
	switch r := w.rng.IntN(10); {
	case r < 4 && len(tickets) > 0:
		return tickets[w.rng.IntN(len(tickets))]
	case r < 6:
		return w.user()
	}
	return w.users[w.rng.IntN(len(w.users))]
}

// outsider picks, most of the time, a user who holds no seat (a newcomer
// or a waiter checking in), else anyone.
func (w *propWorld) outsider() string {
	in := w.last.occupants()
	var out []string
	for _, u := range w.users {
		if !in[u] {
			out = append(out, u)
		}
	}
	if len(out) > 0 && w.rng.IntN(4) > 0 {
		return out[w.rng.IntN(len(out))]
	}
	return w.users[w.rng.IntN(len(w.users))]
}

// do runs one step, then checks the snapshot after it against the one
// before.
func (w *propWorld) do(desc string, f func() (string, error)) error {
	w.count[strings.Fields(desc)[0]]++
	res, err := f()
	if err != nil {
		return fmt.Errorf("step %d %s: %w", w.step, desc, err)
	}
	if res != "" {
		desc += " -> " + res
	}
	w.trace = append(w.trace, fmt.Sprintf("%d %s", w.step, desc))
	if len(w.trace) > 40 {
		w.trace = w.trace[1:]
	}
	after, err := w.snapshot()
	if err != nil {
		return err
	}
	if err := verify(w.last, after); err != nil {
		return fmt.Errorf("step %d %s: %w\nbefore: %s\nafter:  %s\nlast steps:\n  %s", w.step, desc, err, w.last, after, strings.Join(w.trace, "\n  "))
	}
	switch occ := len(after.occupants()); {
	case occ > after.capacity:
		w.count["(over a lowered capacity)"]++
	case occ == after.capacity:
		w.count["(at capacity)"]++
	}
	w.last = after
	return nil
}

func (w *propWorld) check(replica int, user string) error {
	return w.do(fmt.Sprintf("check r%d %s", replica, user), func() (string, error) {
		res, err := w.replicas[replica].Check(w.ctx, w.app, w.ch, user, w.rule)
		if err != nil {
			return "", err
		}
		w.changed(res.Changes)
		return fmt.Sprintf("%+v", res), nil
	})
}

// join is a presence subscribe of user on node i, as wsnode's joinPresence
// makes it: no gate call for a user with a socket here already.
func (w *propWorld) join(i int, user string) error {
	n := w.nodes[i]
	before := w.last.now
	return w.do(fmt.Sprintf("join n%d %s", i, user), func() (string, error) {
		if n.local[user] > 0 {
			n.local[user]++
			n.rec.AddMember(w.app, w.ch, user, []byte(`{}`), 1)
			n.rec.Add(w.app, w.ch, 1)
			return "local", nil
		}
		ok, reentry, pos, waiting, err := n.gate.Join(w.ctx, w.app, w.ch, user, w.rule)
		if errors.Is(err, ErrFull) {
			return "refused, full", nil
		}
		if err != nil {
			return "", err
		}
		if !ok {
			if pos > 0 {
				n.waiters[user] = true
			}
			return fmt.Sprintf("refused, %d of %d", pos, waiting), nil
		}
		delete(n.waiters, user)
		n.local[user]++
		if _, ok := n.due[user]; !ok {
			// The gate's time is after the snapshot before the step.
			n.due[user] = before + w.rule.Grace.Milliseconds()
		}
		n.rec.AddMember(w.app, w.ch, user, []byte(`{}`), 1)
		n.rec.Add(w.app, w.ch, 1)
		return fmt.Sprintf("ok reentry=%v", reentry), nil
	})
}

// leave unsubscribes one random socket of node i, or half the time all of
// its user's sockets there (the user closes the app).
func (w *propWorld) leave(i int) error {
	n := w.nodes[i]
	var users []string
	for u, c := range n.local {
		if c > 0 {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		return w.join(i, w.user())
	}
	slices.Sort(users)
	user := users[w.rng.IntN(len(users))]
	k := 1
	if w.rng.IntN(2) == 0 {
		k = n.local[user]
	}
	return w.do(fmt.Sprintf("leave n%d %s x%d", i, user, k), func() (string, error) {
		if n.local[user] -= k; n.local[user] == 0 {
			delete(n.local, user)
		}
		n.rec.AddMember(w.app, w.ch, user, nil, -int64(k))
		n.rec.Add(w.app, w.ch, -int64(k))
		return "", nil
	})
}

func (w *propWorld) flush(i int) error {
	n := w.nodes[i]
	return w.do(fmt.Sprintf("flush n%d", i), func() (string, error) {
		left := len(n.left)
		if err := n.rec.Flush(w.ctx); err != nil {
			return "", err
		}
		clear(n.due)
		if len(n.left) > left {
			return "left " + strings.Join(n.left[left:], ","), nil
		}
		return "", nil
	})
}

// announce tells the gate, late, of 1 to all of node i's queued leave edges.
func (w *propWorld) announce(i int) error {
	n := w.nodes[i]
	if len(n.left) == 0 {
		return w.state(w.rng.IntN(2))
	}
	k := 1 + w.rng.IntN(len(n.left))
	users := slices.Clone(n.left[:k])
	return w.do(fmt.Sprintf("announce n%d %s", i, strings.Join(users, ",")), func() (string, error) {
		n.left = n.left[k:]
		var kept []string
		for _, u := range users {
			ok, err := n.gate.Left(w.ctx, w.app, w.ch, u, w.rule)
			if err != nil {
				return "", err
			}
			if ok {
				kept = append(kept, u)
			}
		}
		return "grace for " + strings.Join(kept, ","), nil
	})
}

func (w *propWorld) del(replica int, user string) error {
	for _, n := range w.nodes {
		if _, ok := n.due[user]; ok {
			w.count["delete while joining"]++
		}
	}
	return w.do(fmt.Sprintf("delete r%d %s", replica, user), func() (string, error) {
		st, c, err := w.replicas[replica].Leave(w.ctx, w.app, w.ch, user, w.rule)
		w.changed(c)
		return fmt.Sprintf("%+v %+v", st, c), err
	})
}

// state is GET .../admission; what it says must be what the snapshot after
// it holds.
func (w *propWorld) state(replica int) error {
	var st State
	before := w.last
	err := w.do(fmt.Sprintf("state r%d", replica), func() (string, error) {
		var c Changes
		var err error
		st, c, err = w.replicas[replica].State(w.ctx, w.app, w.ch, w.rule)
		w.changed(c)
		return fmt.Sprintf("%+v %+v", st, c), err
	})
	if err != nil || !w.last.listed {
		return err
	}
	// The hold key expires a grace after its last hold ends (lib.lua's
	// hold): a stall that long between the GET and the snapshot loses
	// holds the GET rightly counted. The GET seats nobody outside
	// before's and after's seats, so that union bounds it.
	if w.last.now-before.now >= w.rule.Grace.Milliseconds() {
		w.count["(GET across a stall)"]++
		seated := before.occupants()
		maps.Copy(seated, w.last.occupants())
		if st.Occupancy < len(w.last.occupants()) || st.Occupancy > len(seated) {
			return fmt.Errorf("step %d: GET says occupancy %d, after a stall the snapshots hold %d and %d: %s", w.step, st.Occupancy, len(seated), len(w.last.occupants()), w.last)
		}
		return nil
	}
	if st.Occupancy != len(w.last.occupants()) {
		return fmt.Errorf("step %d: GET says occupancy %d, the snapshot after it holds %d: %s", w.step, st.Occupancy, len(w.last.occupants()), w.last)
	}
	return nil
}

func (w *propWorld) checkIn(i int) error {
	n := w.nodes[i]
	var users []string
	for u := range n.waiters {
		users = append(users, u)
	}
	slices.Sort(users)
	return w.do(fmt.Sprintf("check-in n%d %s", i, strings.Join(users, ",")), func() (string, error) {
		st, c, states, err := n.gate.CheckIn(w.ctx, w.app, w.ch, users, w.rule)
		if err != nil {
			return "", err
		}
		w.changed(c)
		for j, s := range states {
			if s.Admitted || s.Position == 0 {
				delete(n.waiters, users[j])
			}
		}
		return fmt.Sprintf("%+v %+v %+v", st, c, states), nil
	})
}

func (w *propWorld) capacity(replica int) error {
	n := []int{0, 0, 0, 2, 4, 5}[w.rng.IntN(6)] // 0: clear the override (3)
	return w.do(fmt.Sprintf("capacity r%d %d", replica, n), func() (string, error) {
		var st State
		var c Changes
		var err error
		if n == 0 {
			st, c, err = w.replicas[replica].ClearCapacity(w.ctx, w.app, w.ch, w.rule)
		} else {
			st, c, err = w.replicas[replica].SetCapacity(w.ctx, w.app, w.ch, n, w.rule)
		}
		w.changed(c)
		return fmt.Sprintf("%+v %+v", st, c), err
	})
}

// changed counts what a gate call changed, to show the run exercised it.
func (w *propWorld) changed(c Changes) {
	w.count["(promoted)"] += len(c.Promoted)
	w.count["(freed)"] += len(c.Freed)
	w.count["(dropped)"] += len(c.Dropped)
}

// wait lets Redis's clock move on by 5 to 100 ms.
func (w *propWorld) wait() error {
	d := time.Duration(5+w.rng.IntN(96)) * time.Millisecond
	return w.do(fmt.Sprintf("wait %v", d), func() (string, error) {
		from := w.last.now
		for {
			now, err := w.snapRDB.Time(w.ctx).Result()
			if err != nil {
				return "", err
			}
			if now.UnixMilli() >= from+d.Milliseconds() {
				return "", nil
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// propSnap is every key of the channel's gate, read at once.
type propSnap struct {
	now      int64 // Redis's clock, ms
	capacity int   // the seats: the override, else the rule's, or the member limit
	listed   bool  // the channel keeps a waiting list
	slots    map[string]int64
	wait     map[string]int64 // user -> arrival sequence
	members  map[string]int64
	holds    map[string]int64
}

// snapshotScript reads every key of a channel's gate, and the members, in
// one atomic unit. KEYS: channelKeys.scriptKeys (any key past the members hash that
// is a sorted set of users holding a seat is read as holds).
var snapshotScript = redis.NewScript(`
local t = redis.call('TIME')
local holds = {}
for i = 8, #KEYS do
  if redis.call('TYPE', KEYS[i]).ok == 'zset' then
    for _, v in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1, 'WITHSCORES')) do holds[#holds + 1] = v end
  end
end
return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), redis.call('GET', KEYS[1]) or '',
  redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES'), redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'),
  redis.call('HGETALL', KEYS[6]), holds}
`)

func (w *propWorld) snapshot() (propSnap, error) {
	v, err := snapshotScript.Run(w.ctx, w.snapRDB, keys{}.channel(w.app, w.ch).scriptKeys()).Slice()
	if err != nil {
		return propSnap{}, fmt.Errorf("snapshot: %w", err)
	}
	s := propSnap{now: int64(toInt(v[0])), slots: pairs(v[2]), wait: pairs(v[3]), members: pairs(v[4]), holds: pairs(v[5])}
	override := 0
	if c, _ := v[1].(string); c != "" {
		override, _ = strconv.Atoi(c)
	}
	s.capacity, s.listed = seatsOf(override, w.rule)
	return s, nil
}

func pairs(v any) map[string]int64 {
	l, _ := v.([]any)
	out := make(map[string]int64, len(l)/2)
	for i := 0; i+1 < len(l); i += 2 {
		k, _ := l[i].(string)
		out[k] = int64(toInt(l[i+1]))
	}
	return out
}

// occupants are the users holding a seat: members, slot holders and holds,
// expired or not (stricter than the contract's occupancy).
func (s propSnap) occupants() map[string]bool {
	out := map[string]bool{}
	for _, m := range []map[string]int64{s.members, s.slots, s.holds} {
		for u := range m {
			out[u] = true
		}
	}
	return out
}

func (s propSnap) String() string {
	show := func(m map[string]int64, rel bool) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int { return int(m[a] - m[b]) })
		parts := make([]string, len(keys))
		for i, k := range keys {
			n := m[k]
			if rel {
				n -= s.now
			}
			parts[i] = fmt.Sprintf("%s:%d", k, n)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprintf("capacity %d occupants %d members %s slots(ms left) %s holds(ms left) %s waiting(seq) %s",
		s.capacity, len(s.occupants()), show(s.members, false), show(s.slots, true), show(s.holds, true), show(s.wait, false))
}

var errProperty = errors.New("property violated")

// verify checks the capacity and FIFO properties of one step.
func verify(before, after propSnap) error {
	was, now := before.occupants(), after.occupants()
	var entered []string
	for u := range now {
		if !was[u] {
			entered = append(entered, u)
		}
	}
	slices.Sort(entered)
	if len(now) > after.capacity && len(entered) > 0 {
		return fmt.Errorf("%w: %d users hold a seat, capacity %d; %v got one in this step", errProperty, len(now), after.capacity, entered)
	}
	for _, u := range entered {
		if !after.listed {
			break // no list in force: first come, first served
		}
		seq, waited := before.wait[u]
		for v, s := range after.wait {
			if before.wait[v] == s && (!waited || s < seq) {
				return fmt.Errorf("%w: %s got a seat ahead of %s, who waits still (sequence %d, %s's %d)", errProperty, u, v, s, u, seq)
			}
		}
	}
	return nil
}
