package wsnode

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/resume"
)

// Rewind and resume: a subscriber of a history channel (apps.History) is
// sent history entries after its subscription_succeeded, then the live
// stream. One path serves both: replay reads the last Rewind entries, or,
// for a page that connected with a resume id and acknowledged the channel's
// events before, those after the last serial it acknowledged.
//
// No gap and no reordering: enter marks the subscribe's wait (held) before
// the socket is in the channel index, so from then on every live delivery
// on the channel with a serial is held, not queued. The history is read
// only once the node's subscription is confirmed (join), and the history
// script records an event and publishes it in one unit: an event is in the
// read or published after it, and then held; and once read, the bus is
// synced (fanout.Bus.Sync), so an event published before the read that
// reaches the node after it is held too, and dropped, not delivered after
// the hold as a duplicate. After the history frames,
// the held deliveries whose serial is above the last one sent go out, in
// the serials' order, under the same lock that ends the hold. Over
// tun.holdLimit held deliveries, the hold gives up (a metric, a debug log):
// what it held goes out and live follows, and the history not yet sent is
// dropped, a resume saying so with resume_failed.

// held is the hold of a subscribe to a history channel: live deliveries on
// the channel queued for the socket while its history is read and sent.
type held struct {
	frames  []frame
	serials []string
	// over: the hold gave up; live deliveries are queued again, from
	// gapTo, the first serial it held.
	over  bool
	gapTo string
}

// replayRule is ch's history rule when a subscribe of s to it replays
// history: a rewind, or s has a resume id.
func (s *socket) replayRule(ch string) (apps.History, bool) {
	rule := s.app.Load().HistoryFor(ch)
	return rule, rule.Events > 0 && (rule.Rewind > 0 || s.resume != nil)
}

// resumable is the resume state of a socket that connected with a resume
// id (socket.resume). Only the handler touches id, saved and loaded; the
// socket's mu guards the rest, since it changes with the queue.
//
// What counts as the page's is what it acknowledged, neither what was
// queued nor what was written: a connection cut in a proxy, or a phone
// gone quiet, swallows frames written into the kernel's buffers. Behind a
// run of history events, the node queues a pusher:ping (checkpoints), and
// pusher-js answers every ping with a pusher:pong, in order: a pong
// acknowledges every frame queued before its ping.
type resumable struct {
	id string
	// saved is the (app, id) state read from Redis once per connection,
	// on its first replay.
	saved  map[string]string
	loaded bool

	// queued: channel -> the serial of its last event queued; inFlight,
	// what queued was when the ping awaiting its pong was queued (nil:
	// none awaits one).
	queued, inFlight map[string]string
	// serials: channel -> the serial of its last event acknowledged;
	// changed: those since the last checkpoint.
	serials, changed map[string]string
}

// markQueued notes (s.mu held) that the frame just queued is ch's event
// serial.
func (s *socket) markQueued(ch, serial string) {
	if r := s.resume; r != nil && serial != "" {
		if r.queued == nil {
			r.queued = map[string]string{}
		}
		r.queued[ch] = serial
	}
}

// pingLocked queues (s.mu held) a pusher:ping behind the history events
// queued since the last acknowledged ping, unless one awaits its pong or
// none was queued, and reports whether s must be woken. It is a delivery:
// it counts against the same budget.
func (s *socket) pingLocked() (wake bool) {
	r := s.resume
	if r.inFlight != nil || s.dead || !r.ahead() || !s.fitsLocked(pingFrame) {
		return false
	}
	r.inFlight = maps.Clone(r.queued)
	return s.push([]frame{pingFrame})
}

// ahead reports whether an event was queued past what was acknowledged.
func (r *resumable) ahead() bool {
	for ch, serial := range r.queued {
		if r.serials[ch] != serial {
			return true
		}
	}
	return false
}

// ponged takes s's client's pusher:pong as the acknowledgement of every
// frame queued before the ping it answers.
func (s *socket) ponged() {
	r := s.resume
	if r == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.inFlight == nil {
		return // the client's own, unasked
	}
	if r.serials == nil {
		r.serials, r.changed = map[string]string{}, map[string]string{}
	}
	for ch, serial := range r.inFlight {
		if history.After(serial, r.serials[ch]) {
			r.serials[ch], r.changed[ch] = serial, serial
		}
	}
	r.inFlight = nil
}

// awaitHistory starts s's hold of ch; enter calls it before s is in the
// channel index, so no delivery on ch can pass unseen.
func (s *socket) awaitHistory(ch string) {
	s.mu.Lock()
	s.pending = &chanWait{channel: ch, hold: &held{}}
	s.mu.Unlock()
}

// holdLocked holds f, ch's delivery serial (s.mu held), if a replay of ch
// holds; holding is false if f is to be queued. Over the bound the hold
// gives up: it queues what it held (ok and wake as releaseLocked's), and
// f is to be queued next.
func (s *socket) holdLocked(f frame, ch, serial string) (holding, ok, wake bool) {
	w := s.pending
	if w == nil || w.hold == nil || w.channel != ch || serial == "" || w.hold.over {
		return false, true, false
	}
	h := w.hold
	if len(h.frames) < s.node.tun.holdLimit {
		h.frames, h.serials = append(h.frames, f), append(h.serials, serial)
		return true, true, false
	}
	h.over, h.gapTo = true, serial
	if len(h.serials) > 0 {
		h.gapTo = h.serials[0]
	}
	s.node.m.rewindAbandoned.Inc()
	s.node.log.Debug("a subscriber's replay held too many live events; the rest of its history is not sent, live events go on",
		"socket_id", s.id, "channel", ch, "held", len(h.frames))
	ok, wake = s.releaseLocked(h, "")
	return false, ok, wake
}

// releaseLocked queues (s.mu held) h's deliveries with a serial after
// last ("": all) as deliveries, and reports whether they fit s's budget
// (else s is killed: the caller calls slowConsumer) and whether s must be
// woken.
func (s *socket) releaseLocked(h *held, last string) (ok, wake bool) {
	ch := s.pending.channel
	for i, f := range h.frames {
		if last != "" && !history.After(h.serials[i], last) {
			continue // read from the history already
		}
		if !s.fitsLocked(f) {
			return false, wake
		}
		wake = s.push([]frame{f}) || wake
		s.markQueued(ch, h.serials[i])
	}
	h.frames, h.serials = nil, nil
	return true, wake
}

// fitsLocked reports whether a delivery of f fits s's budget (s.mu held);
// if not, s is killed, and its caller calls slowConsumer once it let go
// of s.mu.
func (s *socket) fitsLocked(f frame) bool {
	frames, bytes := queueLimits(s.app.Load())
	if len(s.queue)-int(s.replies) < frames && s.queued-s.replyBytes+len(f) <= bytes {
		return true
	}
	s.kill()
	return false
}

// replay follows a subscription to ch that succeeded: if enter started a
// hold of ch, it sends the history it owes (see the top of this file),
// then the held live deliveries, and ends the hold.
func (s *socket) replay(sc *scratch, ch string) error {
	a := s.node
	s.mu.Lock()
	w := s.pending
	s.mu.Unlock()
	if w == nil || w.hold == nil || w.channel != ch {
		return nil
	}
	app := s.app.Load()
	rule := app.HistoryFor(ch)
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	from, resuming, err := s.resumeFrom(ctx, ch)
	var events []history.Event
	lost := false
	switch {
	case err != nil:
		lost = true // the state is unknown: say so rather than nothing
	case resuming:
		events, lost, err = a.since(ctx, app.ID, ch, from, rule.Events)
	default:
		events, err = a.bus.History().Last(ctx, app.ID, ch, rule.Rewind)
	}
	if err != nil {
		a.m.errors[reasonRedis].Inc()
		a.log.Warn("cannot read a channel's history for a new subscriber; it gets live events only", "app", app.ID, "channel", ch, "error", err)
		lost = lost || resuming
	}
	if err == nil {
		// Every live event published before the read is held once this
		// returns: none can arrive after the hold ends, a duplicate.
		if serr := a.bus.Sync(ctx, app.ID); serr != nil {
			a.log.Debug("cannot sync with the event bus; an event of the replay may follow it again live", "app", app.ID, "channel", ch, "error", serr)
		}
	}
	if resuming {
		a.m.resumes.Inc()
	}
	if hook := a.tun.replayRead; hook != nil {
		hook(ch)
	}
	last, sent := from, 0
	if lost {
		if err := s.resumeFailed(sc, ch, from, s.firstSerial(events, w)); err != nil {
			return err
		}
	}
	for _, e := range events {
		sc.out = protocol.Message{Event: e.Event, Channel: ch, Data: e.Data, UserID: e.UserID}.AppendTo(sc.out[:0])
		queued := false
		if err := s.queueReplyIf(frameOf(sc.out), func() bool {
			queued = !w.hold.over
			return queued
		}, ch, e.Serial); err != nil {
			return err
		}
		if !queued {
			break
		}
		last, sent = e.Serial, sent+1
	}
	a.m.replayed.Add(float64(sent))
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		return errSocketGone
	}
	over, gapTo := w.hold.over, w.hold.gapTo
	ok, wake := true, false
	if !over {
		ok, wake = s.releaseLocked(w.hold, last)
	}
	if s.pending == w {
		s.pending = nil
	}
	s.mu.Unlock()
	if wake {
		a.send.push(s)
	}
	if !ok {
		s.slowConsumer()
		return errSocketGone
	}
	if over && resuming && sent < len(events) {
		return s.resumeFailed(sc, ch, last, gapTo)
	}
	return nil
}

// firstSerial is the first serial the subscriber gets after a gap: the
// first history entry, else the first live delivery held, else "".
func (s *socket) firstSerial(events []history.Event, w *chanWait) string {
	if len(events) > 0 {
		return events[0].Serial
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(w.hold.serials) > 0 {
		return w.hold.serials[0]
	}
	return ""
}

// resumeFailed tells the subscriber of ch that events after lostFrom (""
// : unknown) and before lostTo ("": the next one it gets) are gone.
func (s *socket) resumeFailed(sc *scratch, ch, lostFrom, lostTo string) error {
	s.node.m.resumeFailed.Inc()
	null := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	data, _ := json.Marshal(map[string]any{"lost_from": null(lostFrom), "lost_to": null(lostTo)})
	sc.out = protocol.Message{Event: protocol.EventResumeFailed, Channel: ch, Data: string(data)}.AppendTo(sc.out[:0])
	return s.reply(sc.out)
}

// resumeFrom is the serial a subscribe of s to ch resumes after, and
// whether there is one: the last queued on this connection (a subscribe
// again after an unsubscribe; what was queued reaches the client first,
// on the same connection), else the (app, id) state, read once per
// connection.
func (s *socket) resumeFrom(ctx context.Context, ch string) (string, bool, error) {
	r := s.resume
	if r == nil {
		return "", false, nil
	}
	s.mu.Lock()
	own := r.queued[ch]
	s.mu.Unlock()
	if own != "" {
		return own, true, nil
	}
	if !r.loaded {
		saved, err := s.node.resumes.Load(ctx, s.app.Load().ID, r.id)
		if err != nil {
			return "", true, err
		}
		r.saved, r.loaded = saved, true
	}
	serial, ok := r.saved[ch]
	return serial, ok, nil
}

// maxReplayPages bounds the reads of one resume: a channel's history holds
// at most its Events, so more pages than this mean it grew meanwhile.
const maxReplayPages = 4

// since reads app's ch after serial, up to the history's events (limit),
// and whether some that followed serial are gone.
func (a *App) since(ctx context.Context, app, ch, serial string, limit int) ([]history.Event, bool, error) {
	var out []history.Event
	lost := false
	for page := range maxReplayPages {
		p, err := a.bus.History().Since(ctx, app, ch, serial, max(limit, 1))
		if err != nil {
			return out, lost, err
		}
		lost = lost || (page == 0 && p.Lost)
		out = append(out, p.Events...)
		if !p.More || len(p.Events) == 0 {
			break
		}
		serial = p.Events[len(p.Events)-1].Serial
	}
	return out, lost, nil
}

// resumers is the node's sockets with a resume id, for the checkpoints.
type resumers struct {
	mu  lockorder.Mutex[lockorder.Leaf]
	set map[*socket]struct{}
}

func (rs *resumers) add(s *socket) {
	rs.mu.Lock()
	if rs.set == nil {
		rs.set = map[*socket]struct{}{}
	}
	rs.set[s] = struct{}{}
	rs.mu.Unlock()
}

func (rs *resumers) remove(s *socket) {
	rs.mu.Lock()
	delete(rs.set, s)
	rs.mu.Unlock()
}

// checkpoints saves, every tun.checkpointEvery until ctx ends, the serials
// the resumable sockets' clients acknowledged since the last save (one
// round trip per app), then pings those with events not acknowledged. So
// a page is sent again at most what it was queued in the last interval
// and its round trip (its pong had not come), and after its node's crash
// one interval more (the checkpoint had not come).
func (a *App) checkpoints(ctx context.Context) {
	t := time.NewTicker(a.tun.checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.checkpoint(ctx)
		}
	}
}

func (a *App) checkpoint(ctx context.Context) {
	if a.resumeFrozen.Load() {
		return
	}
	a.resumers.mu.Lock()
	socks := slices.Collect(maps.Keys(a.resumers.set))
	a.resumers.mu.Unlock()
	byApp := map[*apps.App][]resume.Save{}
	for _, s := range socks {
		s.mu.Lock()
		changed := s.resume.changed
		if len(changed) > 0 {
			s.resume.changed = map[string]string{}
		}
		alive := !s.dead
		wake := s.pingLocked()
		cut := alive && s.dead // the ping did not fit
		s.mu.Unlock()
		if wake {
			a.send.push(s)
		}
		if cut {
			s.slowConsumer()
		}
		if len(changed) > 0 {
			app := s.app.Load()
			byApp[app] = append(byApp[app], resume.Save{ID: s.resume.id, Serials: changed, TTL: historyWindow(app)})
		}
	}
	for app, saves := range byApp {
		sctx, cancel := context.WithTimeout(ctx, a.tun.redisTimeout)
		if err := a.resumes.Save(sctx, app.ID, saves); err != nil {
			a.m.errors[reasonRedis].Inc()
			a.log.Warn("cannot checkpoint resume state; a page resuming after this node's crash may be sent more twice", "app", app.ID, "error", err)
		}
		cancel()
	}
}

// saveResume writes what s's client acknowledged as it closes: a page that
// reconnects is sent again only what it had not acknowledged.
func (s *socket) saveResume() {
	a := s.node
	a.resumers.remove(s)
	s.mu.Lock()
	serials := s.resume.serials
	s.mu.Unlock()
	if len(serials) == 0 || a.resumeFrozen.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	app := s.app.Load()
	if err := a.resumes.Save(ctx, app.ID, []resume.Save{{ID: s.resume.id, Serials: serials, TTL: historyWindow(app)}}); err != nil {
		a.m.errors[reasonRedis].Inc()
		a.log.Warn("cannot save a closing socket's resume state; its page resumes from the last checkpoint", "app", app.ID, "error", err)
	}
}

// historyWindow is how long app's resume state is kept: its longest
// history window, after which no history holds what it names.
func historyWindow(app *apps.App) time.Duration {
	longest := 0
	for _, h := range app.History {
		longest = max(longest, h.Seconds)
	}
	return time.Duration(longest) * time.Second
}
