package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
)

// maxInFlight caps a session's attempts under way; readBatch caps the
// events one read of the log takes; finishGrace is how long attempts under
// way when a holding ends get to finish (see windDown); checkEvery is how
// often a holding compares the group's pending events with its own
// (reconcile).
const (
	maxInFlight = 16
	readBatch   = 500
	finishGrace = 2 * time.Second
	checkEvery  = time.Second
)

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
// runs the steps in order: acknowledge what is finished, take back what
// the group holds pending and the session does not, trim the log, start
// what is due, read new events, collect finished attempts.
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
	posts, cancelPosts := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{t: t, results: make(chan attempt, maxInFlight), lastTrim: time.Now(), posts: posts}
	if !s.takeOver(ctx) {
		cancelPosts()
		return
	}
	defer s.windDown(ctx, cancelPosts)
	for ctx.Err() == nil {
		if !s.ack(ctx) || !s.reconcile(ctx) {
			s.pause(ctx) // Redis failed: wait a little
			continue
		}
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
		wake = s.dispatch(due, now, wake)
		if len(s.acks) > 0 {
			continue // markers undone: acknowledge them before anything else
		}
		s.read(ctx, wake)
		s.collect(ctx)
	}
}

// takeOver creates the target's consumer group if need be, claims what
// other consumers (a dead or deposed holder) read and did not acknowledge,
// then reads everything pending for this replica, in log order. It is
// false when Redis failed; the lease's next holding tries again.
func (s *session) takeOver(ctx context.Context) bool {
	t := s.t
	if err := t.d.rdb.XGroupCreateMkStream(ctx, t.key, t.group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.log.Warn("cannot create the consumer group; retrying when the lease is next held", "error", err)
		return false
	}
	if _, err := s.claimIdle(ctx, 0); err != nil {
		t.log.Warn("cannot take over pending webhook events", "error", err)
		return false
	}
	if err := s.readPending(ctx); err != nil {
		t.log.Warn("cannot read pending webhook events", "error", err)
		return false
	}
	s.nextCheck = time.Now().Add(checkEvery)
	return true
}

// reconcile takes back what the group holds pending and the session does
// not: what this replica read when the reply was lost (Redis crashed or
// failed over mid-read, or the client retried the read unseen), what a
// failover lost the acknowledgement of, and what another consumer (a
// deposed holder reading after the takeover) has left idle for longer
// than it can still be posting it: its lease ran out before this one was
// taken, and its posts get finishGrace more. Left alone, they would stay
// pending for the whole holding: never sent, their markers never
// released, the log never trimmed past them. It runs every checkEvery and
// before the events a read brought are started (a lost reply's events go
// first, in log order), at the cost of one XPENDING summary when nothing
// is missing. false: Redis failed.
func (s *session) reconcile(ctx context.Context) bool {
	if time.Now().Before(s.nextCheck) {
		return true
	}
	t := s.t
	fail := func(err error) bool {
		if ctx.Err() == nil {
			t.log.Warn("cannot check the webhook events pending; retrying", "error", err)
		}
		return false
	}
	p, err := t.d.rdb.XPending(ctx, t.key, t.group).Result()
	if err != nil {
		return fail(err)
	}
	// After ack the queue holds exactly what is pending for this replica.
	mine := p.Consumers[t.d.opts.Replica]
	lost := mine > int64(len(s.queue))
	if p.Count > mine {
		found, err := s.claimIdle(ctx, t.d.opts.LeaseTTL+finishGrace)
		if err != nil {
			return fail(err)
		}
		lost = lost || found
	}
	if lost {
		held := len(s.queue)
		if err := s.readPending(ctx); err != nil {
			return fail(err)
		}
		if n := len(s.queue) - held; n > 0 {
			t.log.Warn("took back webhook events read and never delivered (a read whose reply Redis lost, or a deposed holder's); delivering them", "events", n)
		}
	}
	s.nextCheck = time.Now().Add(checkEvery)
	return true
}

// claimIdle claims for this replica every pending event of the group idle
// for at least minIdle, and reports whether one of them is not in the
// session's queue.
func (s *session) claimIdle(ctx context.Context, minIdle time.Duration) (found bool, err error) {
	t := s.t
	// Bounded by the log's cap: each call scans up to 10 x readBatch.
	for start, n := "0-0", 0; n <= eventlog.MaxEntries/readBatch; n++ {
		ids, next, err := t.d.rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{Stream: t.key, Group: t.group, Consumer: t.d.opts.Replica,
			MinIdle: minIdle, Start: start, Count: readBatch}).Result()
		if err != nil {
			return found, err
		}
		found = found || slices.ContainsFunc(ids, func(id string) bool { return !s.holds(id) })
		if next == "0-0" {
			break
		}
		start = next
	}
	return found, nil
}

// readPending reads everything pending for this replica into the queue,
// leaving out what it holds already.
func (s *session) readPending(ctx context.Context) error {
	t := s.t
	for after, n := "0", 0; n <= eventlog.MaxEntries/readBatch; n++ {
		res, err := t.d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: t.group, Consumer: t.d.opts.Replica, Streams: []string{t.key, after}, Count: readBatch, Block: -1}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			break
		}
		after = res[0].Messages[len(res[0].Messages)-1].ID
		s.add(ctx, res[0].Messages)
	}
	return nil
}

// add adds read events to the queue, in log order, but for those it holds
// already: a failover that lost the group's last reads makes the next
// read bring them again, and reconcile reads all that is pending.
func (s *session) add(ctx context.Context, msgs []redis.XMessage) {
	msgs = slices.DeleteFunc(msgs, func(m redis.XMessage) bool { return s.holds(m.ID) })
	entries := s.t.parse(ctx, msgs)
	inOrder := len(s.queue) == 0 || len(entries) == 0 || cmpID(s.queue[len(s.queue)-1].id, entries[0].id) < 0
	s.queue = append(s.queue, entries...)
	if !inOrder { // events taken back
		slices.SortStableFunc(s.queue, func(a, b *entry) int { return cmpID(a.id, b.id) })
	}
}

// holds reports whether the queue holds the event id.
func (s *session) holds(id string) bool {
	_, ok := slices.BinarySearchFunc(s.queue, id, func(e *entry, id string) int { return cmpID(e.id, id) })
	return ok
}

// pause waits a second after Redis failed, settling the attempts that
// finish meanwhile.
func (s *session) pause(ctx context.Context) {
	wait := time.NewTimer(time.Second)
	defer wait.Stop()
	for {
		select {
		case r := <-s.results:
			s.finish(r)
		case <-wait.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// session is one holding of a target's lease: the events read and not yet
// finished, and the attempts under way. Only deliver's goroutine uses it;
// attempts report on results.
type session struct {
	t        *target
	queue    []*entry // in log order
	results  chan attempt
	inFlight int // attempts started and not collected
	// posts is the attempts' context: it outlives the holding by up to
	// finishGrace (windDown).
	posts context.Context
	acks  []string // ids finished and not acknowledged yet
	// nextCheck is when reconcile next compares the group's pending
	// events with the queue; zero: before anything more is started.
	nextCheck time.Time
	lastTrim  time.Time
	// sweep is the cursor of the sweep of the log's index (trim).
	sweep uint64
	// lastFullLog is when the log-full warning was last logged (trim).
	lastFullLog time.Time
}

// ack acknowledges what is finished (one round trip), then forgets it.
// false: Redis failed, and what is finished is kept to acknowledge next
// time (forgotten, it would be pending and not held: reconcile would send
// it again).
func (s *session) ack(ctx context.Context) bool {
	if len(s.acks) == 0 || ctx.Err() != nil {
		return true // a holding that ended acknowledges in windDown
	}
	t := s.t
	if err := t.d.rdb.XAck(ctx, t.key, t.group, s.acks...).Err(); err != nil {
		t.log.Warn("cannot acknowledge delivered webhook events; retrying (they are sent again if this holding ends first)", "error", err)
		return false
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
	return true
}

// due returns the entries that may be posted now, in log order: per
// channel only the first unfinished one (ordering) or, for a batching
// webhook, the unbroken run of them from the first (one request keeps
// their order), and only once its debounce and its retry backoff are
// over. wake is when the next held entry is due, at most a second away.
func (s *session) due(now time.Time) (due []*entry, wake time.Time) {
	t := s.t
	wake = now.Add(time.Second)
	blocked := map[string]bool{}
	// A channel in flight waits, even for an event reconcile took back
	// that goes before the one in flight.
	for _, e := range s.queue {
		if e.inFlight {
			blocked[e.ev.Channel] = true
		}
	}
	for _, e := range s.queue {
		if e.done || blocked[e.ev.Channel] {
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
func (s *session) dispatch(due []*entry, now, wake time.Time) time.Time {
	b := s.t.batch
	if b == nil {
		for _, e := range due {
			if s.inFlight >= maxInFlight {
				break
			}
			s.start([]*entry{e})
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
		s.start(batch)
	}
	return wake
}

// start posts batch in an attempt of its own; finish settles it.
func (s *session) start(batch []*entry) {
	for _, e := range batch {
		e.inFlight = true
	}
	s.inFlight++
	s.t.d.m.requestEvents.WithLabelValues(s.t.app.ID, s.t.group).Observe(float64(len(batch)))
	go func() { s.results <- attempt{batch, s.t.post(s.posts, batch)} }()
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
		s.add(ctx, res[0].Messages)
		// A read whose reply was lost and retried unseen left older events
		// pending: reconcile before these are started.
		s.nextCheck = time.Time{}
	case err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil:
		t.log.Warn("cannot read webhook events; retrying", "error", err)
		s.nextCheck = time.Time{} // it may have read events whose reply was lost
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

// windDown ends a holding (ctx is done: a reload, the lease lost, a
// shutdown). The attempts under way get finishGrace to finish, and what was
// delivered is acknowledged: cancelling them at once, or leaving their
// acknowledgement to the next holder, made a receiver get an event again
// because the app was reloaded just after its delivery. What is still
// unacknowledged after that is sent again by the next holder (at least
// once, never lost).
func (s *session) windDown(ctx context.Context, cancelPosts context.CancelFunc) {
	defer time.AfterFunc(finishGrace, cancelPosts).Stop()
	for s.inFlight > 0 {
		s.finish(<-s.results)
	}
	cancelPosts()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishGrace)
	defer cancel()
	s.ack(actx)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// parse parses read messages into entries; events this webhook does not
// ask for, and unreadable ones, are acknowledged at once.
func (t *target) parse(ctx context.Context, msgs []redis.XMessage) (queue []*entry) {
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
