package counts

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/redis/go-redis/v9"
)

// Store reads the counts of every app and reaps dead nodes.
type Store struct {
	keys
	rdb redis.UniversalClient
	// LogEvents, if set before use, says what each app's event log
	// (eventlog.Key) takes: reaping a node logs its edges to it as the
	// app's Spec says.
	LogEvents func(app string) eventlog.Spec
	// SliceSize, if set before use, bounds the work of one atomic unit:
	// the contribution fields of a republish's unit, (times reapShare)
	// the fields the slices of a reap in flight take together (see
	// slicesInFlight), and (times four, shared among the contributions)
	// the values a slice of an audit reads. 0 means
	// DefaultSliceSize; at most 4096. Tests make it small so every
	// operation takes many units.
	SliceSize int
	// settle: a recorder's retire that is the first registration of the
	// app Redis sees marks its counts complete this much later (see
	// completeKey).
	settle time.Duration

	// appsSeen is the apps AppsOf last listed, which its next call asks
	// about in the round trip that lists them again.
	appsSeen atomic.Pointer[[]string]

	mu sync.Mutex
	// draining counts the drains of each reap (by its key) this store
	// runs now: FinishReaps leaves those reaps to them.
	draining map[string]int
	// inFlight holds a token for each slice of a reap this store has sent
	// and not yet had answered, whichever drain sent it (see
	// storeSlicesInFlight).
	inFlight chan struct{}
}

// NewStore returns a store of the counts under ks on rdb.
func NewStore(rdb redis.UniversalClient, ks keyspace.Space) *Store {
	return &Store{keys: keys{ks: ks, seen: &reapsSeen{}}, rdb: rdb}
}

// Channel returns the subscription count of one channel cluster-wide (0:
// vacant), leaving out what the reaps under way still hold (see exact.go).
func (s *Store) Channel(ctx context.Context, app, channel string) (int64, error) {
	v, err := s.runExact(ctx, s.rdb, countsScript, app, []string{s.globalKey(app), s.membersKey(app, channel)}, channel, "0")
	if err != nil {
		return 0, fmt.Errorf("read channel count: %w", err)
	}
	n, _, err := countsOf(v)
	if err != nil {
		return 0, fmt.Errorf("read channel count: %w", err)
	}
	return n, nil
}

// ChannelLoad is what a wsnode reads to cap an app's occupied channels.
type ChannelLoad struct {
	// Channels counts the app's occupied channels, as the other reads
	// leave out the reaps under way (see exact.go): exact while each reap
	// holds at most about reapWindow fields, else above the truth by at
	// most the channels only a reap's unscanned part holds. Nodes counts
	// the nodes with a contribution to the app (dead ones too, until their
	// reap starts), and the reading node if it has none yet.
	Channels, Nodes int64
	// Occupied says whether the channel asked about is occupied, exactly.
	Occupied bool
}

// ChannelLoad reads, for node, app's occupied channels, its nodes and
// whether channel is occupied, in one script: O(1) while no reap is under
// way, else O(reapWindow * reaps^2) (scripts/load.lua).
func (s *Store) ChannelLoad(ctx context.Context, app, node, channel string) (ChannelLoad, error) {
	v, err := s.runExact(ctx, s.rdb, loadScript, app, []string{s.globalKey(app), s.nodesKey(app)}, node, channel)
	l, _ := v.([]any)
	if err == nil && len(l) != 4 {
		err = fmt.Errorf("%d values, want 4", len(l))
	}
	var n [4]int64
	for i := 0; err == nil && i < len(l); i++ {
		n[i], err = toInt(l[i])
	}
	if err != nil {
		return ChannelLoad{}, fmt.Errorf("read channel load: %w", err)
	}
	return ChannelLoad{Channels: n[0], Nodes: n[1] + 1 - n[2], Occupied: n[3] == 1}, nil
}

// Channels returns the occupied channels of app whose names start with
// prefix, with their subscription counts cluster-wide, in one atomic read
// of all of them (O(the app's channels * (1 + reaps under way))), leaving
// out what the reaps under way still hold (see exact.go).
func (s *Store) Channels(ctx context.Context, app, prefix string) (map[string]int64, error) {
	v, err := s.runExact(ctx, s.rdb, scanScript, app, []string{s.globalKey(app)}, "", "", 0)
	if err != nil {
		return nil, fmt.Errorf("list channels: %w", err)
	}
	_, zs, err := scanOf(v)
	if err != nil {
		return nil, fmt.Errorf("list channels: %w", err)
	}
	out := make(map[string]int64, len(zs))
	for _, z := range zs {
		if name, _ := z.Member.(string); strings.HasPrefix(name, prefix) {
			out[name] = int64(z.Score)
		}
	}
	return out, nil
}

// Contributions returns every registered node's channel counts in app, and
// each node's last-seen time. Tests and audits compare their sum with the
// global counts.
func (s *Store) Contributions(ctx context.Context, app string) (map[string]map[string]int64, map[string]time.Time, error) {
	nodes, err := s.rdb.ZRangeWithScores(ctx, s.nodesKey(app), 0, -1).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	contrib := make(map[string]map[string]int64, len(nodes))
	seen := make(map[string]time.Time, len(nodes))
	for _, z := range nodes {
		id, _ := z.Member.(string)
		seen[id] = time.UnixMilli(int64(z.Score))
		h, err := s.rdb.HGetAll(ctx, s.nodeKey(app, id)).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("read contribution of %s: %w", id, err)
		}
		c := make(map[string]int64, len(h))
		for f, v := range h {
			kind, ch, _ := parseField(f)
			if kind != 'c' {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("contribution of %s to %q is %q: %w", id, ch, v, err)
			}
			c[ch] = n
		}
		contrib[id] = c
	}
	return contrib, seen, nil
}

// Apps returns every app that has had counts.
func (s *Store) Apps(ctx context.Context) ([]string, error) {
	apps, err := s.rdb.SMembers(ctx, s.appsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return apps, nil
}

// StaleNodes returns up to limit nodes of app whose last-seen is at least
// deadAfter old by Redis's clock.
func (s *Store) StaleNodes(ctx context.Context, app string, deadAfter time.Duration, limit int) ([]string, error) {
	nodes, err := staleScript.Run(ctx, s.rdb, []string{s.nodesKey(app)}, deadAfter.Milliseconds(), limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("find stale nodes: %w", err)
	}
	return nodes, nil
}

// ReapNode removes node's contribution to app if its last-seen is still at
// least deadAfter old. It reports whether it reaped the node and what that
// changed cluster-wide. Reaping a node that is gone already does nothing,
// so concurrent cleaners never subtract twice.
//
// The removal is a sequence of atomic units, each bounded by the store's
// slice size (see Store.SliceSize), never one unit the size of the node's
// contribution: the first re-checks staleness, unregisters the node and
// moves its contribution under a key of this reap's own; each later one
// subtracts some of its fields from the global counts and deletes them
// there. Meanwhile every global still equals the sum of the registered
// contributions and of the reaps under way (what Audit compares), a node
// that resumes republishes into a fresh contribution the slices never
// read, and a field is subtracted by exactly one slice whoever else drains
// the same reap (see FinishReaps). The edges returned are the union of the
// slices' edges; each slice logs its own to the app's event log, member
// leaves before any channel's vacated.
func (s *Store) ReapNode(ctx context.Context, app, node string, deadAfter time.Duration) (bool, Reaped, error) {
	return s.reap(ctx, app, node, deadAfter.Milliseconds())
}

// RemoveNode removes node's contribution to app unconditionally: a node
// leaving gracefully. It is sliced as ReapNode is.
func (s *Store) RemoveNode(ctx context.Context, app, node string) (bool, Reaped, error) {
	return s.reap(ctx, app, node, -1)
}

// DefaultSliceSize is how many contribution fields one unit of a reap or
// a republish takes when SliceSize is 0: about 1 ms of Redis time on an
// app of 300,000 channels (see docs/SCALING.md).
const DefaultSliceSize = 128

// maxSliceSize bounds SliceSize: a slice's fields travel as one script's
// arguments.
const maxSliceSize = 4096

func (s *Store) sliceSize() int {
	switch {
	case s.SliceSize <= 0:
		return DefaultSliceSize
	case s.SliceSize > maxSliceSize:
		return maxSliceSize
	}
	return s.SliceSize
}

func (s *Store) reap(ctx context.Context, app, node string, deadAfterMs int64) (bool, Reaped, error) {
	id, ok, reaped, err := s.startReap(ctx, app, node, deadAfterMs, "", "")
	if err != nil || !ok {
		return false, Reaped{}, err
	}
	reaped.Exact = time.Now()
	if id != "" {
		if err := s.drain(ctx, app, id, &reaped); err != nil {
			return true, reaped, fmt.Errorf("reap node %s of app %s (the rest is left to FinishReaps): %w", node, app, err)
		}
	}
	return true, reaped, nil
}

// startReap runs a reap's first unit (reap.lua). It returns the reap's id,
// "" when the node had no contribution to drain. A non-empty epoch
// retires: the node's own recorder moves its contribution aside to
// republish, under that new epoch (see reap.lua and newEpoch); prev is the
// epoch it last republished under, which tells reap.lua whether the node
// lost its registration (see completeKey).
func (s *Store) startReap(ctx context.Context, app, node string, deadAfterMs int64, epoch, prev string) (id string, ok bool, reaped Reaped, err error) {
	id = newReapID(node, epoch != "")
	keys := []string{s.nodesKey(app), s.nodeKey(app, node), s.reapingKey(app, id), s.reapsKey(app), s.epochsKey(app), s.completeKey(app)}
	retireArg := "0"
	if epoch != "" {
		retireArg = "1"
	}
	v, err := reapScript.Run(ctx, s.rdb, keys, node, deadAfterMs, id, retireArg, epoch, s.settle.Milliseconds(), prev).Int64Slice()
	if err == nil && len(v) < 2 && (len(v) == 0 || v[0] != statusSpared) {
		err = errors.New("short script result")
	}
	if err != nil {
		return "", false, Reaped{}, fmt.Errorf("reap node %s of app %s: %w", node, app, err)
	}
	if v[0] == statusSpared {
		return "", false, Reaped{}, nil
	}
	reaped = Reaped{Edges: Edges{App: app}, SinceSeen: time.Duration(v[1]) * time.Millisecond}
	if v[0] == 0 {
		id = ""
	}
	return id, true, reaped, nil
}

// newReapID names one reap of node: 64 random bits, then the node, which
// FinishReaps reads back after the first ":"; a retire's starts with
// retirePrefix, so reads know the contribution is a live node's (see
// exact.go).
func newReapID(node string, retire bool) string {
	p := ""
	if retire {
		p = retirePrefix
	}
	return fmt.Sprintf("%s%016x:%s", p, rand.Uint64(), node)
}

// newEpoch is a fresh epoch for a node's republish (see epochsKey): 64
// random bits, which only the node's own earlier epochs must differ from.
func newEpoch() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// FinishReaps drains every reap of app under way: those whose cleaner (or
// stopping node) died or failed half-way, and those another cleaner is
// draining now (both then take fields; each is subtracted once), but not
// those this store drains now (a ReapNode in progress finishes its own, or
// leaves it to the next call). It returns what each reap it took part in
// changed, by node, as ReapNode does (SinceSeen is 0: the first unit
// measured it). Its cost when no reap is under way is one SMEMBERS.
func (s *Store) FinishReaps(ctx context.Context, app string) (map[string]Reaped, error) {
	ids, err := s.rdb.SMembers(ctx, s.reapsKey(app)).Result()
	if err != nil {
		return nil, fmt.Errorf("list reaps of app %s: %w", app, err)
	}
	out := map[string]Reaped{}
	for _, id := range ids {
		if s.isDraining(app, id) {
			continue
		}
		_, node, _ := strings.Cut(id, ":")
		reaped := out[node]
		if reaped.App == "" {
			reaped.App = app
		}
		err := s.drain(ctx, app, id, &reaped)
		if reaped.Fields > 0 || !reaped.Empty() {
			out[node] = reaped
		}
		if err != nil {
			return out, fmt.Errorf("finish reap of node %s of app %s: %w", node, app, err)
		}
	}
	return out, nil
}

// slicesInFlight is how many slices of one drain are sent before the
// first of them answers: two, so Redis has the next at hand when one ends
// (a round trip costs more than Redis's time between two). Together they
// take reapShare slice sizes of fields, so what a drain has queued before
// another client's command is that many fields at most.
// storeSlicesInFlight bounds the slices of all the drains of one store
// (the cleaner reaps a node in several apps at once).
//
// reapShare: a reap's slices are larger than a republish's units, as a
// dead node's count is read exact already but its reap still holds
// webhooks and Redis memory: at the default slice size, slices of 256
// fields reaped 300,000 subscriptions in 1.9-2.0 s of wall time against
// 2.4 s with slices of 64, their scripts at most 3.7 ms
// (BenchmarkLargeApp, docs/SCALING.md).
const (
	slicesInFlight      = 2
	storeSlicesInFlight = 8
	reapShare           = 4
)

// drain subtracts the contribution under reap id a slice at a time, adding
// what each slice changed to into. It reads field names by HSCAN, ahead
// of the slices, sorts them a window at a time (scanReap) and hands them
// to reap_slice.lua, which takes those still there, up to slicesInFlight
// slices (of reapShare/slicesInFlight slice sizes) at once: each is an atomic unit that
// subtracts only the fields it deletes, so no order among them and no
// other drain of the same reap changes what is subtracted. One order matters to the event log: a
// presence channel's member_removed before its channel_vacated, as one
// unit would log them. So the fields of channels that have members are
// held back until every slice of the walk has answered: by then no member
// field is left (the walk saw each, and a slice that found one gone ran
// after the unit that took it), and the channels go last.
func (s *Store) drain(ctx context.Context, app, id string, into *Reaped) error {
	s.setDraining(app, id, true)
	defer s.setDraining(app, id, false)
	n := max(reapShare*s.sliceSize()/slicesInFlight, 1)
	d := s.newSlicer(ctx, app, id, into)
	// The scan reads a window ahead of the slices, so the next is at hand
	// when a slot frees.
	batches := make(chan []string, max(sortWindow/n, slicesInFlight))
	var last []string
	var scanErr error
	var scanned sync.WaitGroup
	scanned.Go(func() { last, scanErr = s.scanReap(ctx, app, id, n, d, batches) })
	for b := range batches {
		d.send(b)
	}
	scanned.Wait()
	if scanErr != nil {
		d.fail(scanErr)
	}
	if err := d.wait(); err != nil {
		return err
	}
	d = s.newSlicer(ctx, app, id, into)
	for b := range slices.Chunk(last, n) {
		d.send(b)
	}
	// A scan returns every field present throughout it, and nothing but
	// slices deletes from the hash, so it is empty now; the slice that
	// emptied it dropped the reap from the set. A hash left behind (a
	// field missed all the same) stays listed, for FinishReaps.
	return d.wait()
}

// scanReap walks the contribution under reap id with HSCAN, scanAhead
// slices' worth of fields a command, and sends its fields to out in
// batches of n, sorted within each window of up to sortWindow fields,
// until the walk ends or d has failed; it closes out. It returns the
// fields of channels that have members, which it holds back, sorted.
func (s *Store) scanReap(ctx context.Context, app, id string, n int, d *slicer, out chan<- []string) ([]string, error) {
	defer close(out)
	var window, last []string
	var cursor uint64
	// The first window is small, so the first slices start after a few
	// scans, not a whole window's; each next one is twice as large.
	size := sortWindow / 16
	for d.ok() {
		kv, next, err := s.rdb.HScan(ctx, s.reapingKey(app, id), cursor, "", int64(n*scanAhead)).Result()
		if err != nil {
			return last, fmt.Errorf("scan reaped contribution: %w", err)
		}
		for i := 0; i < len(kv); i += 2 {
			if f := kv[i]; channelHasMembers(f) {
				last = append(last, f)
			} else {
				window = append(window, f)
			}
		}
		cursor = next
		if len(window) >= size || cursor == 0 {
			slices.Sort(window)
			for b := range slices.Chunk(window, n) {
				out <- b
			}
			window, size = nil, min(2*size, sortWindow)
		}
		if cursor == 0 {
			break
		}
	}
	slices.Sort(last)
	return last, nil
}

// sortWindow is how many field names a drain sorts before it slices
// them. HSCAN returns them in hash order, and a channel's removal from the
// global sorted set is a walk down its skiplist whose nodes, among equal
// counts, are compared by name: in name order each walk finds most of its
// path in the cache the previous one left, where in hash order nearly
// every comparison waits on memory (docs/SCALING.md has the figures). A
// window bounds what the cleaner holds (a few MB) and lets the slices
// start before the walk ends.
const sortWindow = 1 << 16

// scanAhead is how many slices' worth of fields one HSCAN of a drain
// reads: its Redis time stays below a slice's (a field costs a scan a
// tenth of what it costs a slice).
const scanAhead = 4

// channelHasMembers reports whether contribution field f counts a
// channel's subscriptions (not a member's) in a channel that has members.
func channelHasMembers(f string) bool {
	ch, ok := strings.CutPrefix(f, "c:")
	return ok && protocol.ChannelKind(ch).HasMembers()
}

// slicer runs the slices of one drain, up to slicesInFlight at once and as
// many as the store's storeSlicesInFlight allow, and adds what each
// changed to into. After the first failure it sends no more; the slices
// in flight still answer and are added.
type slicer struct {
	s        *Store
	ctx      context.Context
	app, id  string
	inFlight chan struct{}
	wg       sync.WaitGroup

	mu   sync.Mutex
	into *Reaped
	err  error
}

func (s *Store) newSlicer(ctx context.Context, app, id string, into *Reaped) *slicer {
	return &slicer{s: s, ctx: ctx, app: app, id: id, into: into, inFlight: make(chan struct{}, slicesInFlight)}
}

// send runs a slice of fields once a slot of the drain's and one of the
// store's are free.
func (d *slicer) send(fields []string) {
	if len(fields) == 0 || !d.ok() {
		return
	}
	store := d.s.slots()
	d.inFlight <- struct{}{}
	store <- struct{}{}
	d.wg.Go(func() {
		defer func() { <-store; <-d.inFlight }()
		var r Reaped
		err := d.s.reapSlice(d.ctx, d.app, d.id, fields, &r)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.into.add(r)
		if err != nil && d.err == nil {
			d.err = err
		}
	})
}

func (d *slicer) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil {
		d.err = err
	}
}

func (d *slicer) ok() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err == nil
}

// wait waits for the slices in flight and returns the first failure.
func (d *slicer) wait() error {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (s *Store) slots() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight == nil {
		s.inFlight = make(chan struct{}, storeSlicesInFlight)
	}
	return s.inFlight
}

func (s *Store) setDraining(app, id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining == nil {
		s.draining = map[string]int{}
	}
	k := s.reapingKey(app, id)
	if on {
		s.draining[k]++
	} else if s.draining[k]--; s.draining[k] <= 0 {
		delete(s.draining, k)
	}
}

func (s *Store) isDraining(app, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining[s.reapingKey(app, id)] > 0
}

func (s *Store) reapSlice(ctx context.Context, app, id string, fields []string, into *Reaped) error {
	spec := logSpec(s.LogEvents, app)
	keys := s.logKeys([]string{s.reapsKey(app), s.reapingKey(app, id), s.globalKey(app)}, app, spec.Logs())
	keys = append(keys, s.fieldKeys(app, fields...)...)
	args := make([]any, 0, 5+len(fields))
	args = append(args, s.unitArgs(app, spec)...)
	args = append(args, id)
	for _, f := range fields {
		args = append(args, f)
	}
	res, err := parseResult(reapSliceScript.Run(ctx, s.rdb, keys, args...))
	if err != nil {
		return fmt.Errorf("reap a slice: %w", err)
	}
	if res.status < 0 {
		// Every field's keys were declared: only a bug gets here.
		return fmt.Errorf("reap a slice: script returned %d", res.status)
	}
	into.Fields += int(res.status)
	into.merge(res.edges(app))
	return nil
}

// add adds what one slice of a reap changed to r, whichever order the
// slices answered in (each channel keeps its latest count, by version).
func (r *Reaped) add(slice Reaped) {
	r.Fields += slice.Fields
	r.merge(slice.Edges)
}
