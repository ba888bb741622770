package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lease"
)

// Defaults of Options.
const (
	DefaultDebounce    = 3 * time.Second
	DefaultRetryWindow = 5 * time.Minute
	DefaultLeaseTTL    = 3 * time.Second
	DefaultTimeout     = 5 * time.Second
	minBackoff         = 500 * time.Millisecond
	maxBackoff         = 30 * time.Second
	maxInFlight        = 16
	readBatch          = 500
	defaultTrimEvery   = 10 * time.Second
)

// Options configure a Deliverer.
type Options struct {
	Apps *apps.Registry
	// Keyspace holds the apps' event logs and the deliverers' leases; the
	// zero Keyspace has the default prefix.
	Keyspace keyspace.Space
	// Replica names this process in the consumer groups (unique per process).
	Replica    string
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// Client posts the webhooks; nil means one with DefaultTimeout. The
	// deliverer uses a copy that never follows redirects (see post).
	Client *http.Client
	// Debounce holds channel_vacated and member_removed this long, dropping
	// them if the channel or member came back meanwhile.
	Debounce time.Duration
	// RetryWindow is how long after its creation an event is retried.
	RetryWindow time.Duration
	// LeaseTTL bounds how long a dead replica's webhooks wait for another.
	LeaseTTL time.Duration
	// TrimEvery is how often the delivered part of an app's log is trimmed.
	TrimEvery time.Duration
}

// Deliverer posts the events of every app's event log to the app's
// webhooks. Each (app, webhook URL) is delivered by one replica at a time,
// the holder of its lease; every replica contends for every webhook, so
// the work spreads over replicas and a dead one's is taken over within a
// lease TTL.
type Deliverer struct {
	rdb  redis.UniversalClient
	opts Options
	log  hclog.Logger
	m    *metrics
}

// New returns a deliverer on rdb.
func New(rdb redis.UniversalClient, opts Options) *Deliverer {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: DefaultTimeout}
	}
	// A copy, so the caller's client keeps its own redirect policy.
	client := *opts.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	opts.Client = &client
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.RetryWindow <= 0 {
		opts.RetryWindow = DefaultRetryWindow
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.TrimEvery <= 0 {
		opts.TrimEvery = defaultTrimEvery
	}
	return &Deliverer{rdb: rdb, opts: opts, log: opts.Logger.Named("webhook"), m: newMetrics(opts.Registerer)}
}

// Run delivers until ctx ends (and only then returns). It follows the apps
// as they are reloaded: a webhook URL added starts its delivery, one
// removed stops, and every target of an app that changed in any way is
// restarted on the app as it now is (its secret, headers, filters). A
// restart is a hand-over like a replica's: what was read but not
// acknowledged is delivered again (at least once, never lost).
func (d *Deliverer) Run(ctx context.Context) error {
	type running struct {
		app  *apps.App
		stop context.CancelFunc
		done chan struct{}
	}
	targets := map[[2]string]*running{} // app id, url
	defer func() {
		for _, r := range targets {
			r.stop()
		}
		for _, r := range targets {
			<-r.done
		}
	}()
	for {
		changed := d.opts.Apps.Changed()
		want := map[[2]string]*apps.App{}
		for _, app := range d.opts.Apps.All() {
			for _, w := range app.Webhooks {
				if w.URL != "" {
					want[[2]string{app.ID, w.URL}] = app
				}
			}
		}
		var stopped []*running
		for k, r := range targets {
			if want[k] != r.app { // removed, or its app changed (a new *App)
				r.stop()
				stopped = append(stopped, r)
				delete(targets, k)
			}
		}
		// Stopped together, waited for together: each may be finishing a
		// request and releasing its lease.
		for _, r := range stopped {
			<-r.done
		}
		for k, app := range want {
			if targets[k] != nil {
				continue
			}
			t := d.target(app, k[1])
			tctx, stop := context.WithCancel(ctx)
			r := &running{app: app, stop: stop, done: make(chan struct{})}
			targets[k] = r
			go func() {
				defer close(r.done)
				e := &lease.Elector{Lease: lease.New(d.rdb, t.leaseKey(), d.opts.LeaseTTL), Log: t.log,
					OnChange: func(active bool) { d.m.active.WithLabelValues(app.ID, t.group).Set(map[bool]float64{true: 1}[active]) }}
				_ = e.Run(tctx, t.deliver)
				d.m.active.DeleteLabelValues(app.ID, t.group)
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// target is one webhook URL of one app.
type target struct {
	d   *Deliverer
	app *apps.App
	url string
	// hooks are the app's webhooks with this URL: an event is sent if one
	// of them wants its type and channel. They share headers and batch
	// (apps checks it).
	hooks   []apps.Webhook
	headers map[string]string
	batch   *apps.WebhookBatch // nil: one event per request
	group   string
	key     string
	log     hclog.Logger
	// trims: this target trims the app's log (the first URL by group name).
	trims bool
	// lastRedirectLog rate-limits the warning about a redirecting receiver
	// (only the deliver goroutine touches it).
	lastRedirectLog time.Time
}

func (d *Deliverer) target(app *apps.App, url string) *target {
	t := &target{d: d, app: app, url: url, group: groupName(url), key: eventlog.Key(d.opts.Keyspace, app.ID)}
	for _, w := range app.Webhooks {
		if w.URL == url {
			t.hooks = append(t.hooks, w)
		}
	}
	t.headers, t.batch = t.hooks[0].Headers, t.hooks[0].Batch
	groups := make([]string, 0, len(app.Webhooks))
	for _, w := range app.Webhooks {
		groups = append(groups, groupName(w.URL))
	}
	sort.Strings(groups)
	t.trims = groups[0] == t.group
	t.log = d.log.With("app", app.ID, "webhook", t.group)
	return t
}

// groupName is the consumer group (and metric label) of a webhook URL.
func groupName(url string) string {
	h := sha256.Sum256([]byte(url))
	return "wh-" + hex.EncodeToString(h[:6])
}

func (t *target) leaseKey() string { return leaseKey(t.d.opts.Keyspace, t.app.ID, t.group) }

// wants reports whether one of the target's webhooks asks for ev: its
// type, and its channel through the webhook's filter.
func (t *target) wants(ev Event) bool {
	return wantsEvent(t.hooks, ev)
}

// entry is one event of the log on its way to this target.
type entry struct {
	id string
	t  int64 // creation, unix ms
	ev Event
	// kind is a marker's (eventlog.Marker.Kind), 0 for a plain event; a
	// marker's event is decided when it is claimed, just before its first
	// attempt (see claim).
	kind     byte
	claimed  bool
	attempts int
	next     time.Time // no attempt before
	seen     time.Time // read into the queue (a batch's wait counts from it)
	inFlight bool
	done     bool // delivered, given up or undone: ack and forget
}

// attempt is one POST of a batch of entries and its outcome: one entry,
// or up to the webhook's batch size (dispatch).
type attempt struct {
	batch []*entry
	err   error
}

// deliver runs while this replica holds the target's lease: it takes over
// the events a previous holder read and did not finish, then reads new
// ones, and posts each, in log order per channel. Each turn of its loop
// runs the steps in order: acknowledge what is finished, trim the log,
// start what is due, read new events, collect finished attempts.
func (t *target) deliver(ctx context.Context) {
	t.log.Info("delivering webhooks", "replica", t.d.opts.Replica)
	defer t.log.Info("no longer delivering webhooks")
	// The queue's gauges are the holder's: a replica that lost the lease
	// must not keep reporting a backlog another now delivers.
	defer t.d.m.depth.DeleteLabelValues(t.app.ID, t.group)
	defer t.d.m.oldest.DeleteLabelValues(t.app.ID, t.group)
	// At 0 from the start, so the first give-up is an increase, which
	// alerts see (a series born at 1 is not one).
	for _, reason := range []string{"expired", "unreadable"} {
		t.d.m.dropped.WithLabelValues(t.app.ID, t.group, reason)
	}
	if t.trims {
		// The log's figures are reported by the replica that trims it.
		defer t.d.m.logBytes.DeleteLabelValues(t.app.ID)
		defer t.d.m.logDropped.forget(t.app.ID)
	}
	queue, ok := t.takeOver(ctx)
	if !ok {
		return
	}
	s := &session{t: t, queue: queue, results: make(chan attempt, maxInFlight), lastTrim: time.Now()}
	// ctx is done, so attempts under way end soon; what they delivered
	// unacknowledged is sent again by the next holder (at least once).
	defer s.abandon()
	for ctx.Err() == nil {
		s.ack(ctx)
		s.t.d.m.depth.WithLabelValues(t.app.ID, t.group).Set(float64(len(s.queue)))
		// After ack the queue holds only unfinished entries, in log order.
		oldest := 0.0
		if len(s.queue) > 0 {
			oldest = float64(s.queue[0].t) / 1000
		}
		t.d.m.oldest.WithLabelValues(t.app.ID, t.group).Set(oldest)
		s.trim(ctx)
		now := time.Now()
		due, wake := s.due(now)
		due, ok := s.claim(ctx, due)
		if !ok {
			s.read(ctx, now.Add(time.Second)) // Redis failed: wait a little
			continue
		}
		wake = s.dispatch(ctx, due, now, wake)
		if len(s.acks) > 0 {
			continue // markers undone: acknowledge them before anything else
		}
		s.read(ctx, wake)
		s.collect(ctx)
	}
}

// takeOver creates the target's consumer group if need be, claims what
// other consumers (a dead or deposed holder) read and did not acknowledge,
// then reads everything pending for this replica, in log order. ok is
// false when Redis failed; the lease's next holding tries again.
func (t *target) takeOver(ctx context.Context) (queue []*entry, ok bool) {
	rdb, me := t.d.rdb, t.d.opts.Replica
	if err := rdb.XGroupCreateMkStream(ctx, t.key, t.group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.log.Warn("cannot create the consumer group; retrying when the lease is next held", "error", err)
		return nil, false
	}
	for start := "0-0"; ; {
		_, next, err := rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{Stream: t.key, Group: t.group, Consumer: me, Start: start, Count: readBatch}).Result()
		if err != nil {
			t.log.Warn("cannot take over pending webhook events", "error", err)
			return nil, false
		}
		if next == "0-0" {
			break
		}
		start = next
	}
	for after := "0"; ; {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: t.group, Consumer: me, Streams: []string{t.key, after}, Count: readBatch, Block: -1}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.log.Warn("cannot read pending webhook events", "error", err)
			return nil, false
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			return queue, true
		}
		queue = t.add(ctx, queue, res[0].Messages)
		after = res[0].Messages[len(res[0].Messages)-1].ID
	}
}

// session is one holding of a target's lease: the events read and not yet
// finished, and the attempts under way. Only deliver's goroutine uses it;
// attempts report on results.
type session struct {
	t        *target
	queue    []*entry // in log order
	results  chan attempt
	inFlight int      // attempts started and not collected
	acks     []string // ids finished since the last ack
	lastTrim time.Time
	// sweep is the cursor of the sweep of the log's index (trim).
	sweep uint64
	// lastFullLog is when the log-full warning was last logged (trim).
	lastFullLog time.Time
}

// ack acknowledges what is finished (one round trip), then forgets it.
func (s *session) ack(ctx context.Context) {
	if len(s.acks) == 0 {
		return
	}
	t := s.t
	if err := t.d.rdb.XAck(ctx, t.key, t.group, s.acks...).Err(); err != nil {
		t.log.Warn("cannot acknowledge delivered webhook events; they may be sent again", "error", err)
	}
	s.acks = s.acks[:0]
	kept := s.queue[:0]
	for _, e := range s.queue {
		if !e.done {
			kept = append(kept, e)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// trim trims the app's log every TrimEvery, if this target is the one that
// trims it, sweeps a slice of its index, and reports the log's size and the
// events its budget refused.
func (s *session) trim(ctx context.Context) {
	t := s.t
	if !t.trims || time.Since(s.lastTrim) < t.d.opts.TrimEvery {
		return
	}
	s.lastTrim = time.Now()
	t.trim(ctx)
	log := eventlog.For(t.d.opts.Keyspace, t.app.ID)
	if next, err := log.Sweep(ctx, t.d.rdb, s.sweep, sweepSlice); err == nil {
		s.sweep = next
	} else {
		t.log.Debug("cannot sweep the webhook log's index", "error", err)
	}
	// Room may be back after drops with no event to follow them: tell
	// them now.
	if _, err := log.Tell(ctx, t.d.rdb, LogBudget(t.app)); err != nil {
		t.log.Debug("cannot log the events_dropped notice", "error", err)
	}
	st, err := log.Stats(ctx, t.d.rdb)
	if err != nil {
		return
	}
	t.d.m.logBytes.WithLabelValues(t.app.ID).Set(float64(st.Bytes))
	t.d.m.logDropped.set(t.app.ID, st.Dropped)
	if st.Untold > 0 && time.Since(s.lastFullLog) >= logFullEvery {
		s.lastFullLog = time.Now()
		t.log.Error("the app's webhook event log is full: events are being dropped (its webhooks are failing or far behind); receivers that ask for events_dropped are told how many once there is room",
			"dropped", st.Untold, "since", st.UntoldSince, "log_bytes", st.Bytes, "budget_bytes", LogBudget(t.app))
	}
}

// sweepSlice is how many index slots a trim's sweep looks at.
const sweepSlice = 500

// due returns the entries that may be posted now, in log order: per
// channel only the first unfinished one (ordering) or, for a batching
// webhook, the unbroken run of them from the first (one request keeps
// their order), and only once its debounce and its retry backoff are
// over. wake is when the next held entry is due, at most a second away.
func (s *session) due(now time.Time) (due []*entry, wake time.Time) {
	t := s.t
	wake = now.Add(time.Second)
	blocked := map[string]bool{}
	for _, e := range s.queue {
		if e.done {
			continue
		}
		if blocked[e.ev.Channel] || e.inFlight {
			blocked[e.ev.Channel] = true
			continue
		}
		if until := t.debounced(e); now.Before(until) {
			blocked[e.ev.Channel] = true
			wake = earliest(wake, until)
			continue
		}
		if now.Before(e.next) {
			blocked[e.ev.Channel] = true
			wake = earliest(wake, e.next)
			continue
		}
		if t.batch == nil {
			blocked[e.ev.Channel] = true
		}
		due = append(due, e)
	}
	return due, wake
}

// dispatch starts attempts for due entries, in order, while fewer than
// maxInFlight are under way; the rest wait for a later turn. Without
// batching each attempt posts one entry. With it, due entries fill
// requests of up to the batch size in log order; a channel's entries go in
// one request, and those that do not fit wait until it is finished (a later
// request of the channel must not overtake a failing one). A request not
// full is held until its oldest entry was read MaxWait ago, for more to
// join it; wake is moved to then.
func (s *session) dispatch(ctx context.Context, due []*entry, now, wake time.Time) time.Time {
	b := s.t.batch
	if b == nil {
		for _, e := range due {
			if s.inFlight >= maxInFlight {
				break
			}
			s.start(ctx, []*entry{e})
		}
		return wake
	}
	var batches [][]*entry
	placed := map[string]int{} // channel -> index of the batch holding its entries
	for _, e := range due {
		if n := len(batches); n == 0 || len(batches[n-1]) == b.Size {
			batches = append(batches, nil)
		}
		cur := len(batches) - 1
		if i, ok := placed[e.ev.Channel]; ok && i != cur {
			continue // its channel is in a full request: after that one
		}
		placed[e.ev.Channel] = cur
		batches[cur] = append(batches[cur], e)
	}
	for _, batch := range batches {
		if len(batch) == 0 || s.inFlight >= maxInFlight {
			break
		}
		if len(batch) < b.Size {
			oldest := batch[0].seen
			for _, e := range batch[1:] {
				oldest = earliest(oldest, e.seen)
			}
			if until := oldest.Add(b.MaxWait); now.Before(until) {
				return earliest(wake, until)
			}
		}
		s.start(ctx, batch)
	}
	return wake
}

// start posts batch in an attempt of its own; finish settles it.
func (s *session) start(ctx context.Context, batch []*entry) {
	for _, e := range batch {
		e.inFlight = true
	}
	s.inFlight++
	s.t.d.m.requestEvents.WithLabelValues(s.t.app.ID, s.t.group).Observe(float64(len(batch)))
	go func() { s.results <- attempt{batch, s.t.post(ctx, batch)} }()
}

// read reads new events into the queue; it waits for them (until wake, at
// most 200 ms) only when no attempt is under way.
func (s *session) read(ctx context.Context, wake time.Time) {
	t := s.t
	block := time.Duration(-1) // no BLOCK: return at once
	if s.inFlight == 0 {
		if block = min(time.Until(wake), 200*time.Millisecond); block < time.Millisecond {
			block = -1 // BLOCK 0 would wait forever
		}
	}
	res, err := t.d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: t.group, Consumer: t.d.opts.Replica, Streams: []string{t.key, ">"}, Count: readBatch, Block: block}).Result()
	switch {
	case err == nil && len(res) > 0:
		s.queue = t.add(ctx, s.queue, res[0].Messages)
	case err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil:
		t.log.Warn("cannot read webhook events; retrying", "error", err)
		clock.Sleep(ctx, time.Second)
	}
}

// collect settles the attempts that finished; with attempts under way and
// nothing to acknowledge, it waits a little for one rather than spin.
func (s *session) collect(ctx context.Context) {
	for drained := false; !drained; {
		select {
		case r := <-s.results:
			s.finish(r)
		default:
			drained = true
		}
	}
	if s.inFlight > 0 && len(s.acks) == 0 {
		select {
		case r := <-s.results:
			s.finish(r)
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// finish settles one attempt's entries.
func (s *session) finish(r attempt) {
	s.inFlight--
	for _, e := range r.batch {
		e.inFlight = false
	}
	s.acks = append(s.acks, s.t.settle(r.batch, r.err)...)
}

// abandon waits for the attempts under way (ctx is done, so they end soon).
func (s *session) abandon() {
	for ; s.inFlight > 0; s.inFlight-- {
		<-s.results
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// add parses read messages into entries; events this webhook does not ask
// for, and unreadable ones, are acknowledged at once.
func (t *target) add(ctx context.Context, queue []*entry, msgs []redis.XMessage) []*entry {
	var skip []string
	now := time.Now()
	for _, m := range msgs {
		e := &entry{id: m.ID, seen: now}
		raw, _ := m.Values["ev"].(string)
		ts, _ := m.Values["t"].(string)
		if k, _ := m.Values["k"].(string); len(k) == 1 {
			e.kind = k[0]
		}
		var err error
		if e.t, err = strconv.ParseInt(ts, 10, 64); err == nil {
			err = json.Unmarshal([]byte(raw), &e.ev)
		}
		switch {
		case err != nil:
			t.log.Error("unreadable event in the webhook log; skipped", "id", m.ID, "error", err)
			t.d.m.dropped.WithLabelValues(t.app.ID, t.group, "unreadable").Inc()
			skip = append(skip, m.ID)
		case !t.wants(e.ev):
			skip = append(skip, m.ID)
		default:
			queue = append(queue, e)
		}
	}
	if len(skip) > 0 {
		if err := t.d.rdb.XAck(ctx, t.key, t.group, skip...).Err(); err != nil {
			t.log.Debug("cannot acknowledge skipped webhook events", "error", err)
		}
	}
	return queue
}

// debounced is when e may first be posted: a channel_vacated or
// member_removed waits the debounce, so a channel or member that comes
// back within it (a page reload) has undone it by the time it is claimed.
func (t *target) debounced(e *entry) time.Time {
	if e.claimed || (e.ev.Name != ChannelVacated && e.ev.Name != MemberRemoved) {
		return time.Time{}
	}
	return time.UnixMilli(e.t + t.d.opts.Debounce.Milliseconds())
}

// claim claims the markers among due that are not claimed yet, in one
// script, and settles what each says now (eventlog.Log.Claim): a change
// undone, one logged again after its channel's occupancy change, or one
// trimmed meanwhile is finished unsent; a subscription count takes the
// channel's count now. It returns the entries of due still to post, and
// false if Redis failed (nothing is to be posted then).
func (s *session) claim(ctx context.Context, due []*entry) ([]*entry, bool) {
	t := s.t
	var markers []eventlog.Marker
	var claiming []*entry
	for _, e := range due {
		if e.kind == 0 || e.claimed {
			continue
		}
		m := eventlog.Marker{ID: e.id, Kind: e.kind, Name: e.ev.Name, Channel: e.ev.Channel, UserID: e.ev.UserID}
		if e.kind == eventlog.KindMember {
			m.Members = counts.MembersKey(t.d.opts.Keyspace, t.app.ID, e.ev.Channel)
		}
		markers, claiming = append(markers, m), append(claiming, e)
	}
	if len(markers) == 0 {
		return due, true
	}
	res, err := eventlog.For(t.d.opts.Keyspace, t.app.ID).Claim(ctx, t.d.rdb, LogBudget(t.app), counts.ChannelsKey(t.d.opts.Keyspace, t.app.ID), markers)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("cannot claim webhook events; retrying", "error", err)
		}
		return nil, false
	}
	for i, e := range claiming {
		e.claimed = true
		n, _ := strconv.ParseInt(res[i], 10, 64)
		switch {
		case e.kind == eventlog.KindCount && n > 0:
			e.ev.SubscriptionCount = &n
		case e.kind != eventlog.KindCount && res[i] == eventlog.ClaimPost:
		default:
			e.done = true
			s.acks = append(s.acks, e.id)
			t.d.m.debounced.WithLabelValues(t.app.ID, t.group).Inc()
		}
	}
	return slices.DeleteFunc(due, func(e *entry) bool { return e.done }), true
}

// post makes one delivery attempt of a batch: one POST carrying its
// events, stamped with the first one's creation time.
func (t *target) post(ctx context.Context, batch []*entry) error {
	events := make([]Event, len(batch))
	for i, e := range batch {
		events[i] = e.ev
	}
	body, err := json.Marshal(struct {
		TimeMs int64   `json:"time_ms"`
		Events []Event `json:"events"`
	}{batch[0].t, events})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	// The webhook's own headers first: apps refuses the ones set below, and
	// these would win anyway.
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	// Exactly application/json: the Node SDK refuses anything else.
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pusher-Key", t.app.Key)
	req.Header.Set("X-Pusher-Signature", Sign(t.app.Secret, body))
	resp, err := t.d.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 3 {
		return &redirectError{status: resp.Status, location: resp.Header.Get("Location")}
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// redirectError is a receiver's 3xx. Redirects are never followed: the
// webhook URL is what the app's owner configured, and following a Location
// would let whoever answers there make the deliverer post, signed, to any
// address it can reach, internal ones included (SSRF). A 3xx is a failed
// attempt like any non-2xx, retried and in the end given up.
type redirectError struct{ status, location string }

func (e *redirectError) Error() string {
	return fmt.Sprintf("receiver answered %s redirecting to %q; webhook redirects are not followed, configure the final URL", e.status, e.location)
}

// redirectLogEvery rate-limits the warning about a redirecting receiver to
// one per webhook per period; every attempt still counts as failed.
const redirectLogEvery = time.Minute

// settle records an attempt's outcome and returns the ids to acknowledge:
// the whole batch once delivered; on failure, those past the retry window
// (given up). The others are retried together after one backoff, so a
// failed request's events go out again as one, none acknowledged before.
// Failed and retried count requests; sent and dropped count events.
func (t *target) settle(batch []*entry, err error) (ids []string) {
	app, group := t.app.ID, t.group
	if err == nil {
		for _, e := range batch {
			e.done = true
			t.d.m.sent.WithLabelValues(app, group).Inc()
			t.d.m.latency.WithLabelValues(app, group).Observe(time.Since(time.UnixMilli(e.t)).Seconds())
			ids = append(ids, e.id)
		}
		return ids
	}
	t.d.m.failed.WithLabelValues(app, group).Inc()
	if redirect := (*redirectError)(nil); errors.As(err, &redirect) && time.Since(t.lastRedirectLog) >= redirectLogEvery {
		// Retries are logged at debug only; a redirect is a configuration
		// problem the operator must see, so it gets a warning (at most one a
		// minute per webhook).
		t.lastRedirectLog = time.Now()
		t.log.Warn("webhook receiver redirects; not followed, the delivery failed", "status", redirect.status, "location", redirect.location)
	}
	attempts := 0
	var retry []*entry
	for _, e := range batch {
		e.attempts++
		age := time.Since(time.UnixMilli(e.t))
		if age >= t.d.opts.RetryWindow {
			e.done = true
			t.d.m.dropped.WithLabelValues(app, group, "expired").Inc()
			t.log.Error("webhook event given up after the retry window", "event", e.ev.Name, "channel", e.ev.Channel,
				"user_id", e.ev.UserID, "id", e.id, "age", age.Round(time.Millisecond), "attempts", e.attempts, "error", err)
			ids = append(ids, e.id)
			continue
		}
		attempts = max(attempts, e.attempts)
		retry = append(retry, e)
	}
	if len(retry) == 0 {
		return ids
	}
	backoff := min(minBackoff<<min(attempts-1, 10), maxBackoff)
	backoff = backoff/2 + rand.N(backoff/2+1)
	next := time.Now().Add(backoff)
	for _, e := range retry {
		e.next = next
	}
	t.d.m.retried.WithLabelValues(app, group).Inc()
	t.log.Debug("webhook delivery failed; will retry", "event", retry[0].ev.Name, "channel", retry[0].ev.Channel, "events", len(retry),
		"attempt", attempts, "in", backoff, "error", err)
	return ids
}

// trim removes the log entries every webhook of the app has finished: those
// before the lowest of each group's oldest pending entry or, with nothing
// pending, its last delivered one. Until every group exists nothing is
// trimmed (a webhook whose replica never started still wants them all).
// Trimming is what frees the log's byte budget (eventlog.Log.Append): the
// entries carry their own byte offsets, so no counter needs updating.
func (t *target) trim(ctx context.Context) {
	groups, err := t.d.rdb.XInfoGroups(ctx, t.key).Result()
	if err != nil {
		return
	}
	have := map[string]redis.XInfoGroup{}
	for _, g := range groups {
		have[g.Name] = g
	}
	lowest := ""
	for _, w := range t.app.Webhooks {
		g, ok := have[groupName(w.URL)]
		if !ok {
			return
		}
		floor := g.LastDeliveredID
		if g.Pending > 0 {
			p, err := t.d.rdb.XPending(ctx, t.key, g.Name).Result()
			if err != nil {
				return
			}
			floor = p.Lower
		}
		if lowest == "" || idLess(floor, lowest) {
			lowest = floor
		}
	}
	if lowest != "" && lowest != "0-0" {
		if err := t.d.rdb.XTrimMinID(ctx, t.key, lowest).Err(); err != nil {
			t.log.Debug("cannot trim the webhook log", "error", err)
		}
	}
}

// idLess compares stream ids "ms-seq".
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ai, _ := strconv.ParseUint(am, 10, 64)
	bi, _ := strconv.ParseUint(bm, 10, 64)
	if ai != bi {
		return ai < bi
	}
	asi, _ := strconv.ParseUint(as, 10, 64)
	bsi, _ := strconv.ParseUint(bs, 10, 64)
	return asi < bsi
}
