package wsnode

import (
	"context"
	"strings"

	"github.com/headcount/headcount/pkg/cache"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/webhook"
)

// chanWait is a subscribe between the socket's join and the end of what
// follows its subscription_succeeded: on a cache channel, the queueing of
// its cached event or pusher:cache_miss; on one with history to replay,
// the end of the replay (hold, replay.go). live is set, under the
// socket's mu, when a delivery on a cache channel was queued for the
// socket meanwhile.
type chanWait struct {
	channel string
	live    bool
	hold    *held
}

// cacheable reports whether an event delivered on a cache channel is one
// the HTTP API caches, so that its live delivery supersedes a cached event
// not yet sent: not the node's own announcements (member events,
// subscription counts) nor client events, which are never cached.
func cacheable(event string) bool {
	return !strings.HasPrefix(event, "pusher_internal:") && !strings.HasPrefix(event, protocol.ClientEventPrefix)
}

// awaitCache starts s's wait for ch's cached event; join calls it before
// s is in the channel index, so no delivery on ch can pass unseen.
func (s *socket) awaitCache(ch string) {
	s.mu.Lock()
	s.pending = &chanWait{channel: ch}
	s.mu.Unlock()
}

// sendCache follows a subscription to ch that succeeded; if ch is a cache
// channel, it sends ch's cached event, else pusher:cache_miss (and the
// cache_miss webhook, once per empty channel across the cluster;
// cache.Store.Fetch).
//
// The cache is read only once this node's subscription to ch is confirmed
// by Redis, and the cache is written before each publish (package cache),
// so every event is either read here or delivered live: none is missed.
// After a hit, the bus is synced (fanout.Bus.Sync): every live event
// published before the read has then been queued for s. If one was (a
// delivery on ch marks s's wait), the cached event is not sent: for one
// publisher it is either older than that live event, or newer and on its
// way live too. So a subscriber never gets an older event after a newer
// one; it may get the cached event twice, cached and then live, when it
// was written before the read and published after it.
//
// If Redis does not answer, the client gets pusher:cache_miss (so it
// fetches the state another way) and no webhook is sent.
func (s *socket) sendCache(sc *scratch, ch string) error {
	a := s.node
	if !protocol.IsCacheChannel(ch) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	wantMiss := webhook.Wants(s.app.Load(), webhook.CacheMiss)
	err := a.bus.WaitJoined(ctx, s.app.Load().ID, []string{ch})
	var e cache.Entry
	var hit, report bool
	if err == nil {
		e, hit, report, err = a.cache.Fetch(ctx, s.app.Load().ID, ch, wantMiss)
	}
	if hit {
		// A miss needs no sync: with the cache empty at the read, no
		// event was published before it (each is written first).
		if serr := a.bus.Sync(ctx, s.app.Load().ID); serr != nil {
			// The event is right; only its order against live events
			// published just before it is not assured.
			a.log.Debug("cannot sync with the event bus; sending the cached event anyway", "app", s.app.Load().ID, "channel", ch, "error", serr)
		}
	}
	if err != nil {
		a.m.errors[reasonRedis].Inc()
		a.log.Warn("cannot read a cache channel's last event; sending cache_miss", "app", s.app.Load().ID, "channel", ch, "error", err)
	}
	msg := protocol.Message{Event: protocol.EventCacheMiss, Channel: ch}
	if hit {
		msg = protocol.Message{Event: e.Event, Channel: ch, Data: e.Data}
	}
	sc.out = msg.AppendTo(sc.out[:0])
	if err := s.queueReplyIf(frameOf(sc.out), func() bool {
		w := s.pending
		s.pending = nil
		return w == nil || !w.live
	}, "", ""); err != nil {
		return err
	}
	if report {
		a.hooks.Enqueue(s.app.Load(), webhook.Event{Name: webhook.CacheMiss, Channel: ch})
	}
	return nil
}
