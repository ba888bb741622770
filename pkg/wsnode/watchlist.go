package wsnode

import (
	"context"
	"strconv"

	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
)

// watchlist is a signed-in socket's watchlist (signin user_data's
// "watchlist"): the users whose online status it is told of. It is set
// once, at the socket's first signin, before the socket enters the index,
// and never changes, so deliver reads it without the socket's lock.
//
// Online means signed in on any node: a member of the app's
// protocol.SignedInChannel, whose member edges the announcer publishes on
// protocol.WatchUserChannel (see pkg/announce). A node joins a watched
// user's bus channel while any of its sockets watches that user.
type watchlist struct {
	users []string
	// mu orders the socket's watchlist frames. status holds each user's
	// latest state (true: online): until the first status is sent, the
	// edges the bus brought, which win over the status read from Redis
	// since they may be newer; after it (sent), what the client was told,
	// so that an edge it already knows is not sent again (an edge
	// published just after the read found the change).
	mu     lockorder.Mutex[rankWatchlist]
	status map[string]bool
	sent   bool
}

// watchUsers starts s's watchlist: it joins each user's bus channel, then,
// once Redis confirmed the joins (so no later edge is missed), reads who
// is online and queues that as the first pusher_internal:watchlist_events,
// online and offline users both (Pusher tells the status of every user of
// the watchlist at signin). Edges that came meanwhile win.
func (s *socket) watchUsers(users []string) {
	a := s.node
	w := &watchlist{users: users, status: map[string]bool{}}
	s.watch = w
	chs := make([]string, len(users))
	for i, u := range users {
		chs[i] = protocol.WatchUserChannel(u)
		a.index.add(chanKey{s.app.Load().ID, chs[i]}, s, presence{})
		a.bus.Join(s.app.Load().ID, chs[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	if err := a.bus.WaitJoined(ctx, s.app.Load().ID, chs); err != nil {
		a.log.Warn("watchlist: the bus did not confirm its joins in time; an online or offline change may be missed", "app", s.app.Load().ID, "error", err)
	}
	online, err := a.store.AreMembers(ctx, s.app.Load().ID, protocol.SignedInChannel, users)
	if err != nil {
		a.m.errors[reasonRedis].Inc()
		a.log.Warn("cannot read the watchlist's online users; only later changes are sent", "app", s.app.Load().ID, "error", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var on, off []string
	for i, u := range users {
		st, seen := w.status[u]
		switch {
		case seen:
		case err != nil:
			continue
		default:
			st = online[i]
		}
		w.status[u] = st
		if st {
			on = append(on, u)
		} else {
			off = append(off, u)
		}
	}
	w.sent = true
	if len(on)+len(off) == 0 {
		return
	}
	if s.enqueue(framed(protocol.AppendWatchlistEvents(newPayload(64+24*len(users)), on, off))) {
		a.m.watchlistFirst.Inc()
	}
}

// unwatchUsers undoes watchUsers when s closes.
func (s *socket) unwatchUsers() {
	a := s.node
	for _, u := range s.watch.users {
		ch := protocol.WatchUserChannel(u)
		a.index.remove(chanKey{s.app.Load().ID, ch}, s)
		a.bus.Leave(s.app.Load().ID, ch)
	}
}

// watchEdge delivers one watched user's online or offline edge (from
// deliver) to this node's sockets that watch the user: one frame, encoded
// once.
func (a *App) watchEdge(app, channel, user string, online bool) {
	var f frame
	a.index.each(chanKey{app, channel}, func(s *socket, _ presence) {
		w := s.watch
		if w == nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if last, told := w.status[user]; w.sent && told && last == online {
			return
		}
		w.status[user] = online
		if !w.sent {
			return
		}
		if f == nil {
			var on, off []string
			if online {
				on = []string{user}
			} else {
				off = []string{user}
			}
			f = framed(protocol.AppendWatchlistEvents(newPayload(64+len(user)), on, off))
		}
		if s.enqueue(f) {
			a.m.watchlistEdge.Inc()
		}
	})
}

// watchlistTooLong is the pusher:error for a watchlist over
// protocol.MaxWatchlist ids, of which only the first are watched.
func watchlistTooLong(n int) *protocol.Error {
	return &protocol.Error{Code: protocol.CodeWatchlistLimit, Message: "Watchlist limit exceeded: " + strconv.Itoa(n) +
		" user ids, the limit is " + strconv.Itoa(protocol.MaxWatchlist) + "; only the first " + strconv.Itoa(protocol.MaxWatchlist) + " are watched"}
}
