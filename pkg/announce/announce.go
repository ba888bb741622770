package announce

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/protocol"
)

// Subscription counts of channels with more than BusyChannel subscribers
// go out at most once per CountEvery when Options.Throttle is set
// (Pusher's documented rule).
const (
	BusyChannel = 100
	CountEvery  = 5 * time.Second
)

// joinWait bounds how long an announcement waits for the bus's joins
// (Options.WaitJoined): an outage delays counts and stops nothing.
const joinWait = time.Second

// Options configure an Announcer.
type Options struct {
	// Apps says what each app asks for. A nil registry knows no app: only
	// member events are published.
	Apps *apps.Registry
	// Bus carries the events to the nodes' subscribers. Required.
	Bus *fanout.Bus
	// Redis holds the apps' event logs, where admission events are
	// appended. Required.
	Redis redis.UniversalClient
	// Keyspace names those logs; the zero Keyspace has the default prefix.
	Keyspace keyspace.Space
	// Gate is the admission gate where members who left start their
	// grace; nil makes no gate calls.
	Gate *admission.Gate
	// Metrics records gate calls (Admission); nil records none.
	Metrics *admission.Metrics
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Timeout bounds each Redis call of an announcement (a publish, a
	// gate leave, an append); 0 leaves them to the caller's context.
	Timeout time.Duration
	// Throttle holds back the counts of busy channels: more than
	// BusyChannel subscribers get at most one count per CountEvery. Run
	// sends the held-back counts about every second, so the last count of
	// a burst still goes out.
	Throttle bool
	// WaitJoined makes an announcement wait (up to a second) until Bus has
	// joined the channels whose counts it announces: a count reaches the caller's
	// own subscribers through the bus too, and a socket whose subscribe
	// caused it must not miss it because the join is still on its way.
	WaitJoined bool
	// OnLeft, if set, is told after the gate's Left for user, who left
	// channel, with the channel's rule and whether a slot is kept for the
	// grace (a node settles the gate when the seat may free).
	OnLeft func(app, channel, user string, rule admission.Rule, kept bool)
	// OnPublishError, if set, counts an event the bus did not take (it is
	// logged here).
	OnPublishError func()
}

// Announcer announces count changes and gate calls; see the package doc.
type Announcer struct {
	opts Options
	log  hclog.Logger

	// mu guards counts, the throttle's state per channel.
	mu     sync.Mutex
	counts map[chanKey]*countState

	// The queue Flushed fills and Run drains (queue.go). qmu guards
	// queue; pubMu serializes announcing, so counts go out in order.
	qmu   sync.Mutex
	queue []counts.Edges
	wake  chan struct{}
	pubMu sync.Mutex
}

type chanKey struct{ app, channel string }

type countState struct {
	sentAt  time.Time
	pending count
	dirty   bool
}

// count is a channel's subscription count and its version
// (counts.Edges.Versions).
type count struct{ n, version int64 }

// New returns an Announcer.
func New(opts Options) *Announcer {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	return &Announcer{opts: opts, log: opts.Logger.Named("announce"), counts: map[chanKey]*countState{}, wake: make(chan struct{}, 1)}
}

// Metrics returns the gate's metrics (nil without them).
func (a *Announcer) Metrics() *admission.Metrics { return a.opts.Metrics }

// wants reports whether e causes anything to announce, so a caller that
// queues edges can skip the rest.
func (a *Announcer) wants(e counts.Edges) bool {
	return len(e.Members) > 0 || (len(e.Channels) > 0 && wantsCounts(a.opts.Apps.ByID(e.App)))
}

// wantsCounts: the app's clients get pusher_internal:subscription_count.
// (Its subscription_count webhooks are logged by the count scripts.)
func wantsCounts(ap *apps.App) bool {
	return ap != nil && ap.EnableSubscriptionCount
}

// announce announces what each edge set of batch causes, in order: member
// events (after the gate's Left for each leaver), then the new counts.
func (a *Announcer) announce(ctx context.Context, batch ...counts.Edges) {
	if a.opts.WaitJoined {
		a.waitJoined(ctx, batch)
	}
	now := time.Now()
	for _, e := range batch {
		ap := a.opts.Apps.ByID(e.App)
		for _, m := range e.Members {
			a.member(ctx, ap, e.App, m)
		}
		if !wantsCounts(ap) {
			continue
		}
		for ch, n := range e.Channels {
			c := count{n, e.Versions[ch]}
			if protocol.ChannelKind(ch).AnnouncesCounts() && a.pass(chanKey{e.App, ch}, c, now) {
				a.sendCount(ctx, ap, ch, c)
			}
		}
	}
}

// member publishes one member edge; a leaver's seat goes into its grace
// first, so a waiter admitted on the notice finds it counted.
func (a *Announcer) member(ctx context.Context, ap *apps.App, app string, m counts.MemberEdge) {
	if m.Channel == protocol.SignedInChannel {
		a.online(ctx, app, m)
		return
	}
	// The version lets a node skip the subscribers whose member list
	// holds the edge already.
	msg := fanout.Message{Channel: m.Channel, Event: protocol.EventMemberRemoved, Data: protocol.MemberRemovedData(m.UserID), Version: m.Version}
	if m.Added {
		// The user's own sockets are not told they joined.
		msg = fanout.Message{Channel: m.Channel, Event: protocol.EventMemberAdded,
			Data: protocol.MemberAddedData(m.UserID, m.UserInfo), ExceptUser: m.UserID, Version: m.Version}
	} else {
		a.left(ctx, ap, m.Channel, m.UserID)
	}
	a.publish(ctx, app, msg)
}

// online tells the nodes whose sockets watch m's user that the user came
// online (their first signed-in socket in the cluster) or went offline
// (their last one gone, or reaped with its node).
func (a *Announcer) online(ctx context.Context, app string, m counts.MemberEdge) {
	ev := protocol.WatchlistOffline
	if m.Added {
		ev = protocol.WatchlistOnline
	}
	a.publish(ctx, app, fanout.Message{Channel: protocol.WatchUserChannel(m.UserID), Event: ev})
}

// left starts the grace of a member whose last socket left ch anywhere in
// the cluster: a member of a capacity-limited channel keeps the seat for
// the grace, as if the socket had only blinked (a crashed node is a
// network blip to its users).
func (a *Announcer) left(ctx context.Context, ap *apps.App, ch, user string) {
	if ap == nil || a.opts.Gate == nil {
		return
	}
	ctx, cancel := a.timeout(ctx)
	defer cancel()
	rule := admission.RuleFor(ap, ch)
	kept, err := a.opts.Gate.Left(ctx, ap.ID, ch, user, rule)
	if err != nil {
		// The slot is then freed at its expiry instead: never kept.
		a.log.Warn("cannot start an admission grace; the seat frees at its expiry", "app", ap.ID, "channel", ch, "user_id", user, "error", err)
		return
	}
	if a.opts.OnLeft != nil {
		a.opts.OnLeft(ap.ID, ch, user, rule, kept)
	}
}

// pass decides whether channel k's new count c goes out now. A vacated
// channel has nobody to tell. With Throttle, a busy channel's count waits
// until CountEvery has passed since its last one (trailing sends it).
func (a *Announcer) pass(k chanKey, c count, now time.Time) bool {
	n := c.n
	if !a.opts.Throttle {
		return n > 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.counts[k]
	if n <= 0 {
		delete(a.counts, k)
		return false
	}
	if st == nil {
		st = &countState{}
		a.counts[k] = st
	}
	if n > BusyChannel && now.Sub(st.sentAt) < CountEvery {
		if !st.dirty || c.version >= st.pending.version {
			st.pending, st.dirty = c, true
		}
		return false
	}
	st.sentAt, st.dirty = now, false
	return true
}

// trailing sends the held-back counts whose interval has passed, so the
// last count of a burst is not lost, and forgets quiet channels. With
// Throttle, call it about every second; without, it does nothing.
func (a *Announcer) trailing(ctx context.Context, now time.Time) {
	type due struct {
		k chanKey
		c count
	}
	var send []due
	a.mu.Lock()
	for k, st := range a.counts {
		switch {
		case st.dirty && now.Sub(st.sentAt) >= CountEvery:
			st.sentAt, st.dirty = now, false
			send = append(send, due{k, st.pending})
		case !st.dirty && now.Sub(st.sentAt) >= CountEvery:
			delete(a.counts, k)
		}
	}
	a.mu.Unlock()
	for _, d := range send {
		if ap := a.opts.Apps.ByID(d.k.app); ap != nil {
			a.sendCount(ctx, ap, d.k.channel, d.c)
		}
	}
}

// sendCount tells a channel's new subscription count to its subscribers,
// with its version, so a node that got a later count drops this one
// should it come second.
func (a *Announcer) sendCount(ctx context.Context, ap *apps.App, ch string, c count) {
	a.publish(ctx, ap.ID, fanout.Message{Channel: ch, Event: protocol.EventSubscriptionCount,
		Data: protocol.SubscriptionCountData(c.n), Version: c.version})
}

// waitJoined waits, within joinWait in all, until the bus has joined the
// channels whose counts batch announces.
func (a *Announcer) waitJoined(ctx context.Context, batch []counts.Edges) {
	ctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	for _, e := range batch {
		if len(e.Channels) == 0 || !wantsCounts(a.opts.Apps.ByID(e.App)) {
			continue
		}
		chs := make([]string, 0, len(e.Channels))
		for ch, n := range e.Channels {
			if n > 0 {
				chs = append(chs, ch)
			}
		}
		if a.opts.Bus.WaitJoined(ctx, e.App, chs) != nil {
			return
		}
	}
}

// publish sends m; a failure is logged and counted, not retried: Pusher's
// delivery is at most once too, and the counts stay exact.
func (a *Announcer) publish(ctx context.Context, app string, m fanout.Message) {
	ctx, cancel := a.timeout(ctx)
	defer cancel()
	if err := a.opts.Bus.Publish(ctx, app, m); err != nil {
		if a.opts.OnPublishError != nil {
			a.opts.OnPublishError()
		}
		a.log.Warn("cannot publish", "app", app, "channel", m.Channel, "event", m.Event, "error", err)
	}
}

func (a *Announcer) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.opts.Timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, a.opts.Timeout)
}
