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
// way when a holding ends get to finish (see windDown).
const (
	maxInFlight = 16
	readBatch   = 500
	finishGrace = 2 * time.Second
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
	posts, cancelPosts := context.WithCancel(context.WithoutCancel(ctx))
	s := &session{t: t, queue: queue, results: make(chan attempt, maxInFlight), lastTrim: time.Now(), posts: posts}
	defer s.windDown(ctx, cancelPosts)
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
	inFlight int // attempts started and not collected
	// posts is the attempts' context: it outlives the holding by up to
	// finishGrace (windDown).
	posts    context.Context
	acks     []string // ids finished since the last ack
	lastTrim time.Time
	// sweep is the cursor of the sweep of the log's index (trim).
	sweep uint64
	// lastFullLog is when the log-full warning was last logged (trim).
	lastFullLog time.Time
}

// ack acknowledges what is finished (one round trip), then forgets it.
func (s *session) ack(ctx context.Context) {
	if len(s.acks) == 0 || ctx.Err() != nil {
		return // a holding that ended acknowledges in windDown
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
