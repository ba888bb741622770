package wsnode

import (
	"context"
	"sync"
	"time"

	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/webhook"
)

// Subscription counts of channels with more than busyChannel subscribers
// go out at most once per countEvery (Pusher's documented rule).
const (
	busyChannel = 100
	countEvery  = 5 * time.Second
)

// announcer publishes, through the bus, what the recorder's flushes
// changed cluster-wide: presence joins and leaves (the 0->1 and 1->0 edges
// of a user's sockets anywhere in the cluster) and subscription counts.
// The recorder reports each edge once, from the node whose flush caused
// it, so each is announced once; every node then delivers it to its own
// subscribers. Publishing runs on the announcer's goroutine, so a slow
// Redis never holds up the recorder's flushes.
type announcer struct {
	a    *App
	mu   sync.Mutex
	q    []counts.Edges
	wake chan struct{}

	// pubMu serializes publishing (the announcer goroutine, and the final
	// publishPending at shutdown) and guards counts.
	pubMu  sync.Mutex
	counts map[chanKey]*countState
}

type countState struct {
	sentAt  time.Time
	pending int64
	dirty   bool
}

func newAnnouncer(a *App) *announcer {
	return &announcer{a: a, wake: make(chan struct{}, 1), counts: map[chanKey]*countState{}}
}

// flushed is the recorder's OnFlushed: it only queues.
func (n *announcer) flushed(f counts.Edges) {
	if len(f.Members) == 0 && !n.wantsCounts(f.App) {
		return
	}
	n.mu.Lock()
	n.q = append(n.q, f)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// wantsCounts: the app's clients get pusher_internal:subscription_count, or
// its webhooks subscription_count events.
func (n *announcer) wantsCounts(app string) bool {
	if len(app) == 0 {
		return false
	}
	ap := n.a.cfg.Apps.ByID(app)
	return ap != nil && (ap.EnableSubscriptionCount || webhook.Wants(ap, webhook.SubscriptionCount))
}

// sendCount tells a channel's new subscription count to its subscribers
// and to the app's webhooks, as the app asks.
func (n *announcer) sendCount(ctx context.Context, k chanKey, c int64) {
	ap := n.a.cfg.Apps.ByID(k.app)
	if ap == nil {
		return
	}
	if ap.EnableSubscriptionCount {
		n.publish(ctx, k.app, fanout.Message{Channel: k.channel, Event: protocol.EventSubscriptionCount, Data: protocol.SubscriptionCountData(c)})
	}
	if webhook.Wants(ap, webhook.SubscriptionCount) {
		n.a.hooks.Enqueue(ap, webhook.Event{Name: webhook.SubscriptionCount, Channel: k.channel, SubscriptionCount: &c})
	}
}

func (n *announcer) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
			n.publishPending(ctx)
		case now := <-t.C:
			n.trailing(ctx, now)
		}
	}
}

// publishPending publishes everything queued so far.
func (n *announcer) publishPending(ctx context.Context) {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	n.mu.Lock()
	q := n.q
	n.q = nil
	n.mu.Unlock()
	n.waitJoined(ctx, q)
	now := time.Now()
	for _, f := range q {
		for _, e := range f.Members {
			m := fanout.Message{Channel: e.Channel, Event: protocol.EventMemberRemoved, Data: protocol.MemberRemovedData(e.UserID)}
			if e.Added {
				// The user's own sockets are not told they joined.
				m = fanout.Message{Channel: e.Channel, Event: protocol.EventMemberAdded,
					Data: protocol.MemberAddedData(e.UserID, e.UserInfo), ExceptUser: e.UserID}
			} else {
				n.a.leftChannel(ctx, f.App, e.Channel, e.UserID)
			}
			n.publish(ctx, f.App, m)
		}
		if !n.wantsCounts(f.App) {
			continue
		}
		for ch, c := range f.Channels {
			if !protocol.ChannelKind(ch).AnnouncesCounts() {
				continue
			}
			n.count(ctx, chanKey{f.App, ch}, c, now)
		}
	}
}

// waitJoined waits until this node's subscribes to the channels whose
// counts q announces are in place in Redis: a count reaches this node's
// subscribers through the bus too, and a socket whose own subscribe caused
// it must not miss it because the subscribe is still on its way. The wait
// is bounded, so an outage delays counts and stops nothing.
func (n *announcer) waitJoined(ctx context.Context, q []counts.Edges) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, f := range q {
		if len(f.Channels) == 0 || !n.wantsCounts(f.App) {
			continue
		}
		chs := make([]string, 0, len(f.Channels))
		for ch, c := range f.Channels {
			if c > 0 {
				chs = append(chs, ch)
			}
		}
		if n.a.bus.WaitJoined(ctx, f.App, chs) != nil {
			return
		}
	}
}

// count publishes a channel's new subscription count, or holds it back on
// a busy channel until countEvery has passed since the last one.
func (n *announcer) count(ctx context.Context, k chanKey, c int64, now time.Time) {
	st := n.counts[k]
	if c <= 0 {
		delete(n.counts, k) // vacated: nobody to tell
		return
	}
	if st == nil {
		st = &countState{}
		n.counts[k] = st
	}
	if c > busyChannel && now.Sub(st.sentAt) < countEvery {
		st.pending, st.dirty = c, true
		return
	}
	st.sentAt, st.dirty = now, false
	n.sendCount(ctx, k, c)
}

// trailing sends held-back counts whose interval has passed, so the last
// count of a burst is not lost, and forgets quiet channels.
func (n *announcer) trailing(ctx context.Context, now time.Time) {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	for k, st := range n.counts {
		switch {
		case st.dirty && now.Sub(st.sentAt) >= countEvery:
			st.sentAt, st.dirty = now, false
			n.sendCount(ctx, k, st.pending)
		case !st.dirty && now.Sub(st.sentAt) >= countEvery:
			delete(n.counts, k)
		}
	}
}

func (n *announcer) publish(ctx context.Context, app string, m fanout.Message) {
	ctx, cancel := context.WithTimeout(ctx, n.a.tun.redisTimeout)
	defer cancel()
	if err := n.a.bus.Publish(ctx, app, m); err != nil {
		// Pusher's delivery is at most once too; the counts stay exact.
		n.a.m.errors[errPublish].Inc()
		n.a.log.Warn("cannot publish", "app", app, "channel", m.Channel, "event", m.Event, "error", err)
	}
}
