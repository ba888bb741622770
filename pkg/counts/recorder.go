package counts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
)

// RecorderOptions tunes a node's Recorder.
type RecorderOptions struct {
	// Keyspace holds the counts to write; the zero Keyspace has the
	// default prefix.
	Keyspace keyspace.Space
	// Heartbeat is how often the node refreshes its last-seen time.
	Heartbeat time.Duration
	// Coalesce is how long changes gather before one flush; 0 flushes as
	// soon as the previous flush is done.
	Coalesce time.Duration
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Registerer receives the recorder's metrics; nil means none.
	Registerer prometheus.Registerer
	// OnFlushed, if set, is told after each successful flush what it changed
	// cluster-wide (new global counts, presence joins and leaves), so the
	// node can announce them. It runs on the flushing goroutine: keep it short.
	OnFlushed func(Edges)
	// LogEvents, if set, says what each app's event log (eventlog.Key)
	// takes: every flush and the final Remove log their edges to it as the
	// app's Spec says.
	LogEvents func(app string) eventlog.Spec
	// Liveness, if set, is the node's liveness subscription (its Ups are
	// read by Run). Every flush then also records the node-level last-seen
	// on the liveness shard, marked subscribed while Liveness is confirmed,
	// and so does each confirmation; Remove deletes it. The cleaner's
	// liveness check looks only at nodes that record it.
	Liveness *Liveness
	// Address, with a Liveness, is the host:port where the node's admin
	// port serves GET /liveness, recorded with the node-level last-seen so
	// the active cleaner can watch the node (see Store.WatchNodes); empty:
	// none, and the node is left to the liveness check and dead-after.
	Address string
	// SliceSize bounds the fields one atomic unit of a republish writes or
	// subtracts (as Store.SliceSize; 0 means DefaultSliceSize). Tests make
	// it small.
	SliceSize int
}

// Recorder is one wsnode's view of its own counts: it keeps the node's local
// truth (what its sockets are subscribed to) and publishes it to Redis as the
// node's contribution, coalescing changes per channel.
type Recorder struct {
	keys
	rdb  redis.UniversalClient
	node string
	opts RecorderOptions
	log  hclog.Logger
	m    *recorderMetrics

	mu     sync.Mutex
	apps   map[string]*appState
	closed bool // after Remove: nothing more is written

	syncMu  sync.Mutex // one flush or removal at a time
	wake    chan struct{}
	healthy atomic.Bool
	// reported: a flush's outcome was logged once (under syncMu), so a
	// Redis unreachable from the start is logged too.
	reported bool
}

type appState struct {
	// local is the truth: this node's count per contribution field
	// (channel subscriptions, presence members, connections).
	local map[string]int64
	// infos holds the user_info of local presence members, by field.
	infos map[string]json.RawMessage
	// pending holds changes not yet in Redis, by field.
	pending map[string]int64
	// registered is true while Redis holds this node's contribution as we
	// last wrote it. False means the next flush replaces it from local.
	registered bool
	// epoch is the token of the contribution this node's last republish
	// started (see epochsKey), sent with every delta and heartbeat: Redis
	// refuses them once another republish has retired that contribution.
	// "" until the first republish, which every app starts with.
	epoch string
	// declare holds fields of the contribution in Redis that the local
	// truth no longer has: the next replace declares their keys too.
	declare map[string]bool
}

type recorderMetrics struct {
	flushes  *prometheus.CounterVec
	changes  prometheus.Counter
	resyncs  *prometheus.CounterVec
	duration prometheus.Histogram
	batch    prometheus.Histogram
}

func newRecorderMetrics(reg prometheus.Registerer) *recorderMetrics {
	f := promauto.With(reg)
	return &recorderMetrics{
		flushes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_counts_flushes_total",
			Help: "Flushes of count changes and heartbeats to Redis, by result.",
		}, []string{"result"}),
		changes: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_counts_changes_total",
			Help: "Subscription changes recorded (before coalescing).",
		}),
		resyncs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_counts_resyncs_total",
			Help: "Full republications of this node's contribution to an app, by reason.",
		}, []string{"reason"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "headcount_counts_flush_seconds",
			Help:    "Time one flush to Redis took.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		batch: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "headcount_counts_flush_changes",
			Help:    "Coalesced changes per atomic unit written to Redis (a replace counts its whole contribution).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
	}
}

// NewRecorder returns a recorder for node nodeID.
func NewRecorder(rdb redis.UniversalClient, nodeID string, opts RecorderOptions) *Recorder {
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	r := &Recorder{
		keys: keys{ks: opts.Keyspace},
		rdb:  rdb,
		node: nodeID,
		opts: opts,
		log:  opts.Logger.Named("counts"),
		m:    newRecorderMetrics(opts.Registerer),
		apps: map[string]*appState{},
		wake: make(chan struct{}, 1),
	}
	return r
}

// Add records that the node's subscriptions to channel of app changed by
// delta. It never blocks on Redis.
func (r *Recorder) Add(app, channel string, delta int64) {
	r.change(app, channelField(channel), delta, nil)
}

// AddMember records that the node's sockets of user userID subscribed to
// presence channel changed by delta. userInfo is kept for the member list
// (the latest one given wins). It never blocks on Redis. For a presence
// channel, call it alongside Add(app, channel, delta), which counts the
// sockets; a channel with members but no count (protocol.SignedInChannel)
// takes AddMember alone.
func (r *Recorder) AddMember(app, channel, userID string, userInfo json.RawMessage, delta int64) {
	r.change(app, memberField(channel, userID), delta, userInfo)
}

// AddConnections records that the node's open sockets of app changed by
// delta (for per-app connection limits).
func (r *Recorder) AddConnections(app string, delta int64) {
	r.change(app, connectionsField, delta, nil)
}

func (r *Recorder) change(app, field string, delta int64, info json.RawMessage) {
	if delta == 0 {
		return
	}
	r.mu.Lock()
	st := r.apps[app]
	if st == nil {
		st = &appState{local: map[string]int64{}, infos: map[string]json.RawMessage{}, pending: map[string]int64{}}
		r.apps[app] = st
	}
	n := st.local[field] + delta
	if n < 0 {
		// The caller's bookkeeping is wrong; keep Redis sane and say so.
		r.log.Error("count would go negative; clamping and republishing", "app", app, "field", field, "delta", delta)
		n, st.registered = 0, false
	}
	if n == 0 {
		delete(st.local, field)
		delete(st.infos, field)
	} else {
		st.local[field] = n
		if info != nil {
			st.infos[field] = info
		}
	}
	if p := st.pending[field] + delta; p == 0 {
		delete(st.pending, field)
	} else {
		st.pending[field] = p
	}
	r.mu.Unlock()
	r.m.changes.Inc()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Local returns a copy of the node's local channel counts for app.
func (r *Recorder) Local(app string) map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int64{}
	if st := r.apps[app]; st != nil {
		for f, n := range st.local {
			if ch, ok := strings.CutPrefix(f, "c:"); ok {
				out[ch] = n
			}
		}
	}
	return out
}

// Healthy reports whether the last flush reached Redis.
func (r *Recorder) Healthy() bool { return r.healthy.Load() }

// Run flushes changes as they come (after the coalescing window) and
// heartbeats every app this node has counts in, until ctx ends. Failed
// flushes are retried with backoff up to the heartbeat interval.
func (r *Recorder) Run(ctx context.Context) error {
	tick := time.NewTicker(r.opts.Heartbeat)
	defer tick.Stop()
	window := time.NewTimer(0)
	<-window.C
	backoff := time.Duration(0)
	var ups <-chan struct{} // nil, never ready, without a Liveness
	if r.opts.Liveness != nil {
		ups = r.opts.Liveness.Ups()
	}
	for {
		heartbeat := false
		select {
		case <-ctx.Done():
			return nil
		case <-ups:
			// Record the confirmation at once, not at the next flush: a
			// node killed before then is reaped by the liveness check
			// only if it is recorded.
			r.markLive(ctx)
			continue
		case <-tick.C:
			heartbeat = true
		case <-r.wake:
			if d := r.opts.Coalesce + backoff; d > 0 {
				window.Reset(d)
				select {
				case <-ctx.Done():
					window.Stop()
					return nil
				case <-window.C:
				}
			}
		}
		if err := r.flush(ctx, heartbeat); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, 10*time.Millisecond), r.opts.Heartbeat)
			select {
			case r.wake <- struct{}{}:
			default:
			}
		} else {
			backoff = 0
		}
	}
}

// Flush publishes pending changes now; tests and benchmarks use it.
func (r *Recorder) Flush(ctx context.Context) error { return r.flush(ctx, false) }

// Heartbeat refreshes the node's last-seen in every app now, publishing
// pending changes with it.
func (r *Recorder) Heartbeat(ctx context.Context) error { return r.flush(ctx, true) }

type op struct {
	app     string
	epoch   string // of the contribution the pairs change (appState.epoch)
	replace bool
	// republish: one of the delta chunks that write the whole local truth
	// into a contribution just retired (see republish); the app is
	// registered once all of them succeed.
	republish bool
	// declare: more fields whose keys the call must declare (a replace
	// removes old fields not in pairs).
	declare []string
	pairs   map[string]int64
	infos   map[string]json.RawMessage // user_info of member fields in pairs
	cmd     *redis.Cmd
}

func (r *Recorder) flush(ctx context.Context, heartbeat bool) error {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	if heartbeat && r.idle() {
		// Nothing to publish yet: health is whether Redis answers.
		return r.setHealth(ctx, r.rdb.Ping(ctx).Err())
	}
	var err error
	sent := false
	// A second round replaces contributions the first found missing (or
	// could not write for want of scripts); a third is never needed unless
	// Redis loses data again meanwhile, which the next heartbeat handles.
	for round := 0; round < 2; round++ {
		var again, wrote bool
		again, wrote, err = r.flushOnce(ctx, heartbeat && round == 0)
		sent = sent || wrote
		if err != nil || !again {
			break
		}
	}
	if !sent {
		return nil // nothing to write: Redis was not asked, so its health is unknown
	}
	return r.setHealth(ctx, err)
}

// idle reports whether the node has no app to heartbeat yet.
func (r *Recorder) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.apps) == 0 && !r.closed
}

// setHealth records whether Redis took the last flush, logging changes once.
func (r *Recorder) setHealth(ctx context.Context, err error) error {
	if err != nil {
		if ctx.Err() != nil {
			return err // shutting down: not an outage
		}
		if r.healthy.Swap(false) || !r.reported {
			r.reported = true
			r.log.Warn("cannot write counts to Redis; will republish this node's state when it answers", "error", err)
		}
		return err
	}
	r.reported = true
	if !r.healthy.Swap(true) {
		r.log.Info("counts reach Redis", "node", r.node)
	}
	return nil
}

// flushOnce writes what takeOps gives; sent is false when that was nothing
// and Redis was not called.
func (r *Recorder) flushOnce(ctx context.Context, heartbeat bool) (again, sent bool, err error) {
	ops, newApps := r.takeOps(heartbeat)
	if len(ops) == 0 {
		return false, false, nil
	}
	start := time.Now()
	ops, retired, err := r.republish(ctx, ops)
	for _, o := range ops {
		r.m.batch.Observe(float64(len(o.pairs)))
	}
	if err == nil {
		err = r.execGroups(ctx, ops, newApps)
	}
	r.m.duration.Observe(time.Since(start).Seconds())
	if isNoScript(err) {
		// Redis restarted or failed over. Ops that failed this way wrote
		// nothing and are replaced in the next round; ops that succeeded on
		// other shards stand, so nothing is re-sent as a delta.
		if err = loadScripts(ctx, r.rdb); err != nil {
			err = fmt.Errorf("load count scripts: %w", err)
		}
		again = err == nil
	}
	settleAgain, flushed := r.settle(ops, err)
	if settleAgain {
		again = true
	}
	flushed = r.drainRetired(ctx, retired, flushed)
	if r.opts.OnFlushed != nil {
		for _, f := range flushed {
			r.opts.OnFlushed(f)
		}
	}
	r.m.flushes.WithLabelValues(map[bool]string{true: "ok", false: "error"}[err == nil]).Inc()
	return again && err == nil, true, err
}

// takeOps moves pending changes into ops under the lock: a replace from the
// local truth for an app whose contribution is not known to be in Redis, else
// the coalesced deltas (or, for a heartbeat, an empty delta).
func (r *Recorder) takeOps(heartbeat bool) ([]*op, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil
	}
	var ops []*op
	var newApps []string
	for app, st := range r.apps {
		switch {
		case !st.registered:
			pairs := make(map[string]int64, len(st.local))
			for f, n := range st.local {
				pairs[f] = n
			}
			o := &op{app: app, replace: true, pairs: pairs}
			for f := range st.declare {
				o.declare = append(o.declare, f)
			}
			ops = append(ops, o)
			newApps = append(newApps, app)
			clear(st.pending)
		case len(st.pending) > 0:
			ops = append(ops, chunk(app, st.pending)...)
			st.pending = make(map[string]int64, min(len(st.pending), maxPairs))
		case heartbeat:
			ops = append(ops, &op{app: app})
		}
		for _, o := range ops {
			if o.app != app {
				continue
			}
			o.epoch = st.epoch
			for f := range o.pairs {
				if info, ok := st.infos[f]; ok {
					if o.infos == nil {
						o.infos = map[string]json.RawMessage{}
					}
					o.infos[f] = info
				}
			}
		}
	}
	return ops, newApps
}

// republish turns each replace op into a republish in bounded units: one
// that moves the contribution Redis holds aside, under a reap of its own
// (reap.lua, retiring: O(1), the node stays registered with an empty
// contribution, under a new epoch), then the local truth as delta chunks
// of at most the slice size (in the flush's pipeline, with that epoch),
// then, after them, slices that subtract the retired contribution
// (drainRetired). A unit sent under an older epoch that Redis runs only
// now (the client gave up on it; Redis had read it) is refused: the
// contribution it changed is the one retired, which has it or not as Redis
// ran it before the retire or never. The globals equal the sum of the
// registered contributions and of the reaps under way at every step, and a
// member or channel both contributions hold never drops to zero on the
// way (the new is added before the old is subtracted), so no leave or
// vacated event is made up; counts read meanwhile include both, for the
// length of the republish. A failure anywhere leaves the app unregistered:
// the next flush retires what was written and starts again, and a retired
// contribution left behind is drained by the cleaner. It returns the ops to
// run and the retired reaps, by app.
func (r *Recorder) republish(ctx context.Context, ops []*op) ([]*op, map[string]string, error) {
	var out []*op
	var retired map[string]string
	s := r.store()
	for _, o := range ops {
		if !o.replace {
			out = append(out, o)
			continue
		}
		epoch := newEpoch()
		r.mu.Lock()
		prev := r.apps[o.app].epoch
		r.mu.Unlock()
		id, _, _, err := s.startReap(ctx, o.app, r.node, -1, epoch, prev)
		if err != nil {
			// Nothing of this flush is written: every op fails with it, so
			// every app it took changes from replaces next time.
			for _, o := range ops {
				o.cmd = redis.NewCmd(ctx)
				o.cmd.SetErr(err)
			}
			return ops, nil, fmt.Errorf("retire the contribution to republish: %w", err)
		}
		if id != "" {
			if retired == nil {
				retired = map[string]string{}
			}
			retired[o.app] = id
		}
		r.mu.Lock()
		r.apps[o.app].epoch = epoch
		r.mu.Unlock()
		for _, c := range chunkN(o.app, o.pairs, s.sliceSize()) {
			c.republish, c.epoch = true, epoch
			for f := range c.pairs {
				if info, ok := o.infos[f]; ok {
					if c.infos == nil {
						c.infos = map[string]json.RawMessage{}
					}
					c.infos[f] = info
				}
			}
			out = append(out, c)
		}
	}
	return out, retired, nil
}

// drainRetired subtracts the contributions republish retired, after the
// new ones are written, and adds what that changed to flushed (the later
// count of a channel, by version, wins; the leaves follow the joins). One that fails
// half-way stays listed as a reap under way, for the cleaner to finish.
func (r *Recorder) drainRetired(ctx context.Context, retired map[string]string, flushed []Edges) []Edges {
	s := r.store()
	for app, id := range retired {
		reaped := Reaped{Edges: Edges{App: app}}
		if err := s.drain(ctx, app, id, &reaped); err != nil && ctx.Err() == nil {
			r.log.Warn("cannot subtract the contribution this node republished over; the cleaner finishes it", "app", app, "error", err)
		}
		if reaped.Empty() {
			continue
		}
		i := slices.IndexFunc(flushed, func(e Edges) bool { return e.App == app })
		if i < 0 {
			flushed = append(flushed, reaped.Edges)
			continue
		}
		flushed[i].merge(reaped.Edges)
	}
	return flushed
}

// store is a Store writing as this recorder does.
func (r *Recorder) store() *Store {
	s := NewStore(r.rdb, r.ks)
	s.LogEvents = r.opts.LogEvents
	s.SliceSize = r.opts.SliceSize
	// A retire that finds this node's contribution gone makes the app's
	// counts complete only once every live node has found the same and
	// republished: each heartbeats within a heartbeat of Redis coming
	// back; the second is slack for a flush under way then (completeKey).
	s.settle = 2 * r.opts.Heartbeat
	return s
}

// Registered reports whether, as far as this node knows, Redis holds its
// contribution to app as it last wrote it: false before its first flush
// of app, and from a write that failed or was refused until the
// republish that follows has written all of it.
func (r *Recorder) Registered(app string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.apps[app]
	return st != nil && st.registered
}

// maxPairs bounds the changes one script call applies, so a storm over many
// channels becomes several short atomic units in one pipeline instead of one
// long script that would stall Redis for every other client.
const maxPairs = 512

func chunk(app string, pending map[string]int64) []*op { return chunkN(app, pending, maxPairs) }

// chunkN splits pending into ops of at most size pairs.
func chunkN(app string, pending map[string]int64, size int) []*op {
	if len(pending) <= size {
		return []*op{{app: app, pairs: pending}}
	}
	var ops []*op
	cur := make(map[string]int64, size)
	for ch, n := range pending {
		if len(cur) == size {
			ops = append(ops, &op{app: app, pairs: cur})
			cur = make(map[string]int64, size)
		}
		cur[ch] = n
	}
	return append(ops, &op{app: app, pairs: cur})
}

// execGroups runs ops in pipelines of at most about four slices' worth of
// changes each (any number of small ops, such as heartbeats, share one):
// Redis runs a pipeline's scripts back to back as it reads them, so a
// republish of thousands of units in one pipeline would keep every other
// client of the shard waiting for tens of milliseconds. Every group is
// sent whatever an earlier one returned; the first error is returned.
func (r *Recorder) execGroups(ctx context.Context, ops []*op, newApps []string) error {
	budget := 4 * r.store().sliceSize()
	var first error
	for start := 0; start < len(ops); {
		end, pairs := start, 0
		for end < len(ops) && (end == start || pairs+len(ops[end].pairs) <= budget) {
			pairs += len(ops[end].pairs)
			end++
		}
		if err := r.exec(ctx, ops[start:end], newApps); err != nil && first == nil {
			first = err
		}
		newApps = nil
		start = end
	}
	return first
}

func (r *Recorder) exec(ctx context.Context, ops []*op, newApps []string) error {
	var seen *redis.Cmd
	cmds, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(newApps) > 0 {
			p.SAdd(ctx, r.appsKey(), toAny(newApps)...)
		}
		for _, o := range ops {
			keys, args := r.applyCall(o)
			o.cmd = applyScript.EvalSha(ctx, p, keys, args...)
		}
		// After the apps' writes: on one Redis the node-level last-seen
		// is then never older than the per-app ones it summarises.
		if r.opts.Liveness != nil {
			seen = r.nodeSeen(ctx, p, false)
		}
		return nil
	})
	if seen == nil || err == nil {
		return err
	}
	// The node-level entry only speeds up the cleaner: its failure (the
	// liveness shard down, say) must not fail the counts' flush.
	if serr := seen.Err(); serr != nil {
		r.log.Debug("cannot record the node-level last-seen; the cleaner reaps this node by dead-after if it dies meanwhile", "error", serr)
	}
	for _, c := range cmds {
		if c != seen && c.Err() != nil {
			return c.Err()
		}
	}
	return nil
}

// applyCall is the KEYS and ARGV of apply.lua for op o.
func (r *Recorder) applyCall(o *op) ([]string, []any) {
	// A replace never gets here: republish turned it into deltas.
	logs := r.logs(o.app)
	args := make([]any, 0, 7+2*len(o.pairs)+2*len(o.infos))
	args = append(args, r.unitArgs(o.app, logs)...)
	args = append(args, r.node, o.epoch, len(o.pairs))
	for f, n := range o.pairs {
		args = append(args, f, strconv.FormatInt(n, 10))
	}
	for f, info := range o.infos {
		args = append(args, f, string(info))
	}
	fields := make([]string, 0, len(o.pairs)+len(o.declare))
	for f := range o.pairs {
		fields = append(fields, f)
	}
	fields = append(fields, o.declare...)
	return r.scriptKeys(o.app, r.node, logs.Logs(), fields...), args
}

// nodeSeen queues the node-level last-seen write on c (see
// RecorderOptions.Liveness); confirmOnly records a confirmed subscription
// without moving the last-seen of a node that has one.
func (r *Recorder) nodeSeen(ctx context.Context, c redis.Scripter, confirmOnly bool) *redis.Cmd {
	subscribed, only := "0", "0"
	if !r.opts.Liveness.Since().IsZero() {
		subscribed = "1"
	}
	if confirmOnly {
		only = "1"
	}
	return nodeSeenScript.Eval(ctx, c, r.livenessKeys(), r.node, subscribed, only, r.opts.Address)
}

// markLive records that the liveness subscription is confirmed, after each
// confirmation, if the node has counts to be reaped. The last-seen stays
// what the flushes wrote: a subscription says the process lives, not that
// its counts are current.
func (r *Recorder) markLive(ctx context.Context) {
	r.syncMu.Lock() // after Remove, nothing is recorded
	defer r.syncMu.Unlock()
	r.mu.Lock()
	skip := r.closed || len(r.apps) == 0
	r.mu.Unlock()
	if skip {
		return
	}
	if err := r.nodeSeen(ctx, r.rdb, true).Err(); err != nil && ctx.Err() == nil {
		r.log.Debug("cannot record the confirmed liveness subscription; the next flush does", "error", err)
	}
}

// settle records each op's outcome. Any op whose result is not a clean
// success leaves its app unregistered, so the next flush replaces the
// contribution from the local truth; this is what keeps a retry from
// counting twice. It reports whether a contribution was found missing, and
// what the successful ops changed cluster-wide.
func (r *Recorder) settle(ops []*op, execErr error) (again bool, flushed []Edges) {
	r.mu.Lock()
	defer r.mu.Unlock()
	republished := map[string]bool{} // app -> every chunk of its republish succeeded
	defer func() {
		for app, ok := range republished {
			if st := r.apps[app]; ok && !st.registered {
				r.m.resyncs.WithLabelValues("published").Inc()
				st.registered = true
				st.declare = nil
			}
		}
	}()
	for _, o := range ops {
		st := r.apps[o.app]
		res, err := parseResult(o.cmd)
		if o.republish {
			ok, seen := republished[o.app]
			republished[o.app] = (ok || !seen) && err == nil && res.status == statusApplied
		}
		switch {
		case err == nil && res.status == statusApplied:
			if len(res.channels) > 0 || len(res.members) > 0 {
				flushed = append(flushed, res.edges(o.app))
			}
		case err == nil && res.status == statusUndeclared:
			// Old fields of ours in Redis that the local truth dropped:
			// replace again, declaring their keys. Nothing was written.
			r.log.Debug("contribution has fields not declared; replacing with their keys", "app", o.app, "fields", len(res.undeclared))
			if st.declare == nil {
				st.declare = map[string]bool{}
			}
			for _, f := range res.undeclared {
				st.declare[f] = true
			}
			st.registered, again = false, true
		case err == nil && res.status == statusUnregistered:
			r.log.Warn("this node's contribution is missing from Redis (reaped while alive, Redis lost data, or a retire of its ran late); republishing", "app", o.app, "node", r.node)
			r.m.resyncs.WithLabelValues("missing").Inc()
			st.registered, again = false, true
		case err == nil:
			r.log.Error("Redis refused a change that would make a count negative; republishing", "app", o.app, "node", r.node, "result", res.status)
			r.m.resyncs.WithLabelValues("negative").Inc()
			st.registered, again = false, true
		default:
			if execErr == nil && !isNoScript(err) {
				r.log.Error("count script failed", "app", o.app, "error", err)
			}
			st.registered = false
		}
	}
	return again, flushed
}

func (r *Recorder) logs(app string) eventlog.Spec { return logSpec(r.opts.LogEvents, app) }

// logSpec is what app's event log takes under logEvents (nil: nothing).
func logSpec(logEvents func(string) eventlog.Spec, app string) eventlog.Spec {
	if logEvents == nil {
		return eventlog.Spec{}
	}
	return logEvents(app)
}

// Remove deletes this node's contribution from every app (a graceful stop)
// and stops further writes; OnFlushed hears what that changed, so members
// can be announced as gone. Changes recorded after it are ignored.
func (r *Recorder) Remove(ctx context.Context) error {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	r.closed = true
	apps := make([]string, 0, len(r.apps))
	for app := range r.apps {
		apps = append(apps, app)
	}
	r.mu.Unlock()
	s := r.store()
	var errs []error
	for _, app := range apps {
		_, reaped, err := s.RemoveNode(ctx, app, r.node)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.opts.OnFlushed != nil && !reaped.Empty() {
			r.opts.OnFlushed(reaped.Edges)
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The node-level entry stays: the cleaner's liveness check reaps
		// what is left once the subscription goes.
		return fmt.Errorf("remove node %s: %w", r.node, err)
	}
	if r.opts.Liveness != nil {
		if _, err := s.ForgetNode(ctx, r.node, -1); err != nil {
			return err
		}
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
