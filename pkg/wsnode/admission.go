package wsnode

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
)

// waiterTick is how often the waiters loop looks for channels due a
// check-in; each channel is checked in at a third of its dropout time, or
// at once when the bus says its list moved.
const waiterTick = 250 * time.Millisecond

// joinPresence is a new presence subscription of s to ch as p: the gate
// (admission.Gate.Join: the member limit of every presence channel, and
// admission on capacity-limited ones, README, Admission) and then, only
// for a user it lets in, the cluster's member list: a refused user costs
// one small script, never the list. A user let in has their seat held for
// the grace, within which this node's recorder flushes the new member
// (milliseconds). A user already a member through another socket on this
// node passes without the gate: that socket's own hold or membership
// covers them until the node's flush.
// A user refused who is on the waiting list is registered as a waiter of
// ch: the socket then gets its place as it changes (EventAdmission*).
// While Redis's members may miss some node's (joinGate) a newcomer waits,
// within the Redis timeout, and is then refused with 503.
func (s *socket) joinPresence(sc *scratch, ch string, p presence) error {
	a := s.node
	local := false
	a.index.each(chanKey{s.app.Load().ID, ch}, func(_ *socket, q presence) { local = local || q.user == p.user })
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	if !local {
		rule := admission.RuleFor(s.app.Load(), ch)
		ok, reentry, position, waiting, err := s.joinGate(ctx, ch, p.user, rule)
		var incomplete *admission.IncompleteError
		switch {
		case errors.As(err, &incomplete):
			a.m.errors[reasonRedis].Inc()
			a.log.Warn("presence members still being restored in Redis; refused a newcomer", "app", s.app.Load().ID, "channel", ch)
			return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionServer, Status: http.StatusServiceUnavailable,
				Message: "the channel's members are being restored after a Redis outage; try again"})
		case errors.Is(err, admission.ErrFull):
			a.m.errors[reasonPresenceLimit].Inc()
			// soketi's refusal, word for word, then the limit.
			return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionLimit, Status: int(protocol.CodeOverCapacity),
				Message: "The maximum members per presence channel limit was reached: " + strconv.Itoa(rule.Members) + " (maxPresenceMembersPerChannel)"})
		case err != nil:
			a.m.errors[reasonRedis].Inc()
			a.log.Warn("cannot check the presence gate", "app", s.app.Load().ID, "channel", ch, "error", err)
			return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionServer, Status: http.StatusServiceUnavailable,
				Message: "admission cannot be checked right now; try again"})
		case !ok:
			return s.refuseAdmission(sc, ch, p.user, position, waiting)
		}
		if reentry {
			a.announce.Metrics().Reentered(s.app.Load().ID)
		}
		s.unwait(ch)
	}
	members, version, err := a.store.MembersAt(ctx, s.app.Load().ID, ch)
	if err != nil {
		// The seat the gate held frees at the hold's end.
		a.m.errors[reasonRedis].Inc()
		a.log.Warn("cannot read presence members", "app", s.app.Load().ID, "channel", ch, "error", err)
		return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionServer, Status: http.StatusServiceUnavailable,
			Message: "the member list cannot be read right now; try again"})
	}
	return s.presenceReply(sc, ch, p, members, version)
}

// joinGate is the gate's Join, waiting (within ctx) while the members may
// not hold every live node's: Redis lost its data (or is new) and the
// nodes are republishing, this one included. Seating a newcomer before
// then could overfill the channel with members Redis has not seen yet.
func (s *socket) joinGate(ctx context.Context, ch, user string, rule admission.Rule) (ok, reentry bool, position, waiting int, err error) {
	a := s.node
	app := s.app.Load().ID
	for {
		pause := 10 * time.Millisecond
		if a.rec.Registered(app) {
			ok, reentry, position, waiting, err = a.gate.Join(ctx, app, ch, user, rule)
			var incomplete *admission.IncompleteError
			if !errors.As(err, &incomplete) {
				return ok, reentry, position, waiting, err
			}
			pause = min(max(incomplete.Wait, pause), a.cfg.Heartbeat)
		} else {
			// This node's own members are not all in Redis: its first
			// flush of the app, or the republish after a failed one.
			err = &admission.IncompleteError{}
		}
		if !clock.Sleep(ctx, pause) {
			return false, false, 0, 0, err
		}
	}
}

// refuseAdmission answers AdmissionRequired and, if the user is on the
// waiting list (position > 0), registers s as a waiter of ch.
func (s *socket) refuseAdmission(sc *scratch, ch, user string, position, waiting int) error {
	msg := "the channel is at capacity and this user holds no slot: ask the app to admit you (POST .../admission)"
	if position > 0 {
		msg = "the channel is at capacity: you are number " + strconv.Itoa(position) + " of " + strconv.Itoa(waiting) +
			" on the waiting list; stay connected for " + protocol.EventAdmissionWaiting + " and " + protocol.EventAdmissionAdmitted + " events on this channel"
		s.wait(ch, user, position)
	}
	return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionAdmissionRequired, Status: http.StatusForbidden, Message: msg})
}

// waiterKey is one socket waiting for one channel.
type waiterKey struct {
	s  *socket
	ch string
}

// waiters tracks this node's sockets waiting for capacity-limited channels
// and which channels are due a check-in. Sockets register from their own
// goroutine; the waiters loop reads.
type waiters struct {
	mu lockorder.Mutex[lockorder.Leaf]
	// byChannel counts each channel's registered sockets.
	byChannel map[chanKey]int
	// checked is when each channel was last checked in; dirty marks the
	// ones the bus said moved.
	checked map[chanKey]time.Time
	dirty   map[chanKey]bool
	// told is the last state each socket was sent: its position, -1 once
	// told it is admitted, 0 once told it is off the list.
	told map[waiterKey]int
	// settleAt lists the gates to settle when a seat may free (a member
	// left; their grace or their last subscribe's hold ends).
	settleAt []settleAt
	wake     chan struct{}
}

func newWaiters() *waiters {
	return &waiters{byChannel: map[chanKey]int{}, checked: map[chanKey]time.Time{}, dirty: map[chanKey]bool{},
		told: map[waiterKey]int{}, wake: make(chan struct{}, 1)}
}

// wait registers s as a waiter of ch (once) on this node's bus and index.
func (s *socket) wait(ch, user string, position int) {
	a := s.node
	if s.waiting == nil {
		s.waiting = new([]string)
	}
	if slices.Contains(*s.waiting, ch) {
		return
	}
	*s.waiting = append(*s.waiting, ch)
	k := chanKey{s.app.Load().ID, ch}
	a.waiters.mu.Lock()
	a.waiters.byChannel[k]++
	a.waiters.told[waiterKey{s, ch}] = position
	if _, ok := a.waiters.checked[k]; !ok {
		a.waiters.checked[k] = time.Now()
	}
	a.waiters.mu.Unlock()
	a.index.add(chanKey{s.app.Load().ID, protocol.AdmissionChannel(ch)}, s, presence{user: user})
	a.bus.Join(s.app.Load().ID, protocol.AdmissionChannel(ch))
}

// unwait undoes wait, if s waits for ch. It runs on s's own goroutine.
func (s *socket) unwait(ch string) {
	a := s.node
	if s.waiting == nil {
		return
	}
	i := slices.Index(*s.waiting, ch)
	if i < 0 {
		return
	}
	if *s.waiting = slices.Delete(*s.waiting, i, i+1); len(*s.waiting) == 0 {
		s.waiting = nil
	}
	k := chanKey{s.app.Load().ID, ch}
	a.index.remove(chanKey{s.app.Load().ID, protocol.AdmissionChannel(ch)}, s)
	a.bus.Leave(s.app.Load().ID, protocol.AdmissionChannel(ch))
	a.waiters.mu.Lock()
	defer a.waiters.mu.Unlock()
	delete(a.waiters.told, waiterKey{s, ch})
	if a.waiters.byChannel[k]--; a.waiters.byChannel[k] <= 0 {
		delete(a.waiters.byChannel, k)
		delete(a.waiters.checked, k)
		delete(a.waiters.dirty, k)
	}
}

// listMoved is deliver's callback for the internal admission channel.
func (a *App) listMoved(app, ch string) {
	a.waiters.mu.Lock()
	if _, ok := a.waiters.byChannel[chanKey{app, ch}]; ok {
		a.waiters.dirty[chanKey{app, ch}] = true
	}
	a.waiters.mu.Unlock()
	select {
	case a.waiters.wake <- struct{}{}:
	default:
	}
}

// runWaiters checks in, for every channel with waiters here, at a third of
// its dropout time (so a connected waiter never drops out) and whenever the
// list moved, and tells each waiter what changed. One goroutine per node.
func (a *App) runWaiters(ctx context.Context) {
	t := time.NewTicker(waiterTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.waiters.wake:
		}
		now := time.Now()
		a.settleDue(ctx, now)
		var due []chanKey
		a.waiters.mu.Lock()
		for k := range a.waiters.byChannel {
			ap := a.cfg.Apps.ByID(k.app)
			if ap == nil {
				continue
			}
			if a.waiters.dirty[k] || now.Sub(a.waiters.checked[k]) >= admission.RuleFor(ap, k.channel).Dropout/3 {
				due = append(due, k)
				a.waiters.checked[k], a.waiters.dirty[k] = now, false
			}
		}
		a.waiters.mu.Unlock()
		for _, k := range due {
			a.checkInWaiters(ctx, k)
		}
	}
}

// checkInWaiters checks in k's waiters on this node and sends each socket
// its new state if it changed.
func (a *App) checkInWaiters(ctx context.Context, k chanKey) {
	ap := a.cfg.Apps.ByID(k.app)
	var socks []*socket
	var users []string
	seen := map[string]int{}
	var of []int // socks[i]'s index in users
	a.index.each(chanKey{k.app, protocol.AdmissionChannel(k.channel)}, func(s *socket, p presence) {
		i, ok := seen[p.user]
		if !ok {
			i = len(users)
			seen[p.user] = i
			users = append(users, p.user)
		}
		socks, of = append(socks, s), append(of, i)
	})
	if len(users) == 0 {
		return
	}
	rule := admission.RuleFor(ap, k.channel)
	cctx, cancel := context.WithTimeout(ctx, a.tun.redisTimeout)
	st, changes, states, err := a.gate.CheckIn(cctx, k.app, k.channel, users, rule)
	cancel()
	if err != nil {
		a.m.errors[reasonRedis].Inc()
		a.log.Warn("cannot check in waiters", "app", k.app, "channel", k.channel, "waiters", len(users), "error", err)
		return
	}
	// Tells other nodes when their waiters moved too.
	rctx, rcancel := context.WithTimeout(ctx, a.tun.redisTimeout)
	a.announce.Admission(rctx, ap, k.channel, st, changes, "", false)
	rcancel()
	a.log.Debug("checked in waiters", "app", k.app, "channel", k.channel, "waiters", len(users), "waiting", st.Waiting, "occupancy", st.Occupancy, "promoted", len(changes.Promoted), "dropped", len(changes.Dropped), "freed", len(changes.Freed))
	for i, s := range socks {
		ws := states[of[i]]
		now := ws.Position
		if ws.Admitted {
			now = -1
		}
		a.waiters.mu.Lock()
		key := waiterKey{s, k.channel}
		before, registered := a.waiters.told[key]
		if registered {
			a.waiters.told[key] = now
		}
		a.waiters.mu.Unlock()
		if !registered || before == now {
			continue
		}
		var event, data string
		switch {
		case ws.Admitted:
			event, data = protocol.EventAdmissionAdmitted, `{"expires_in":`+strconv.Itoa(int(math.Ceil(ws.ExpiresIn.Seconds())))+`}`
		case ws.Position == 0:
			event, data = protocol.EventAdmissionDropped, `{}`
		default:
			event, data = protocol.EventAdmissionWaiting, `{"position":`+strconv.Itoa(ws.Position)+`,"waiting":`+strconv.Itoa(st.Waiting)+`}`
		}
		s.enqueue(framed(protocol.Message{Event: event, Channel: k.channel, Data: data}.AppendTo(newPayload(len(event) + len(k.channel) + len(data) + 32))))
	}
}

// leftChannel is told, once the gate started the grace of user, whose last
// socket left ch anywhere in the cluster, whether a slot was kept.
func (a *App) leftChannel(app, ch, user string, rule admission.Rule, kept bool) {
	// Settle the gate when the seat frees, so the head of the list is
	// admitted at once, not at some later check-in: when the grace ends,
	// which is also when the hold of the user's last subscribe has ended
	// (it lasts a grace from that subscribe); and now if no slot was kept
	// (the app gave it up with DELETE, or the user never had one).
	now := time.Now()
	due := []settleAt{{k: chanKey{app, ch}, at: now.Add(rule.Grace + 50*time.Millisecond)}}
	if kept {
		a.log.Debug("member left a limited channel; slot kept for the grace", "app", app, "channel", ch, "user_id", user, "grace", rule.Grace)
	} else {
		due = append(due, settleAt{k: chanKey{app, ch}, at: now})
	}
	a.waiters.mu.Lock()
	a.waiters.settleAt = append(a.waiters.settleAt, due...)
	a.waiters.mu.Unlock()
}

// settleAt is a channel whose gate must be settled at a time (a seat may
// free then).
type settleAt struct {
	k  chanKey
	at time.Time
}

// settleDue settles the gates whose time came and tells the nodes with
// waiters if someone was admitted.
func (a *App) settleDue(ctx context.Context, now time.Time) {
	a.waiters.mu.Lock()
	var due []chanKey
	rest := a.waiters.settleAt[:0]
	for _, s := range a.waiters.settleAt {
		if now.Before(s.at) {
			rest = append(rest, s)
		} else {
			due = append(due, s.k)
		}
	}
	a.waiters.settleAt = rest
	a.waiters.mu.Unlock()
	for _, k := range due {
		ap := a.cfg.Apps.ByID(k.app)
		if ap == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, a.tun.redisTimeout)
		st, changes, err := a.gate.State(cctx, k.app, k.channel, admission.RuleFor(ap, k.channel))
		if err == nil {
			a.announce.Admission(cctx, ap, k.channel, st, changes, "", false)
		}
		cancel()
		if err != nil {
			a.log.Warn("cannot settle an admission gate after a grace; the next check-in will", "app", k.app, "channel", k.channel, "error", err)
		}
	}
}
