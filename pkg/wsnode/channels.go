package wsnode

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/portcap"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/ratelimit"
	"github.com/headcount/headcount/pkg/webhook"
)

// Presence and event limits (Pusher's documented defaults); apps may
// override the user_info size and event size. The member limit is the
// presence gate's (admission.RuleFor).
const (
	defaultMaxUserInfoKB  = 1
	maxUserIDLength       = 128 // characters
	defaultMaxEventKB     = 10
	maxClientEventNameLen = 200
)

func kb(v float64, def int) int {
	if v > 0 {
		return int(v * 1024)
	}
	return def * 1024
}

// subscribePresence authorizes a presence subscription and answers it
// with the cluster-wide member list.
//
// With channel_data the signature is over socket_id:channel:channel_data
// (channel_data exactly as received). Without it the member is the
// connection's signed-in user, and the signature accepted is over
// socket_id:channel: what pusher-http-node and -go produce when asked to
// authorize a presence channel without presence data.
func (s *socket) subscribePresence(sc *scratch, sub protocol.Subscribe) error {
	ch := sub.Channel
	var m protocol.Member
	if sub.ChannelData != "" {
		if err := auth.CheckChannelAuth(s.app.Load(), s.id, ch, sub.ChannelData, sub.Auth); err != nil {
			return s.authFailed(sc, ch, err)
		}
		var err error
		if m, err = protocol.ParseChannelData(sub.ChannelData); err != nil {
			s.node.m.errors[reasonMalformed].Inc()
			return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionInvalid, Status: http.StatusBadRequest, Message: err.Error()})
		}
	} else {
		if s.user == nil {
			return s.authFailed(sc, ch, errors.New("presence subscription without channel_data requires pusher:signin first"))
		}
		if err := auth.CheckChannelAuth(s.app.Load(), s.id, ch, "", sub.Auth); err != nil {
			return s.authFailed(sc, ch, err)
		}
		m = *s.user
	}
	if n := utf8.RuneCountInString(m.UserID); n > maxUserIDLength {
		return s.presenceLimit(sc, ch, "user_id is "+strconv.Itoa(n)+" characters long, over the limit of "+strconv.Itoa(maxUserIDLength))
	}
	if limit := kb(s.app.Load().MaxPresenceMemberSizeInKb, defaultMaxUserInfoKB); len(m.UserInfo) > limit {
		return s.presenceLimit(sc, ch, "user_info is "+strconv.Itoa(len(m.UserInfo))+" bytes, over the limit of "+strconv.Itoa(limit))
	}
	if serr := s.allowChannel(ch); serr != nil {
		return s.sendError(sc, serr)
	}
	return s.joinPresence(sc, ch, presence{user: m.UserID, info: m.UserInfo})
}

func (s *socket) presenceLimit(sc *scratch, ch, msg string) error {
	s.node.m.errors[reasonPresenceLimit].Inc()
	return s.sendError(sc, &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionLimit, Status: http.StatusBadRequest, Message: msg})
}

// presenceReply records a presence subscription the gate let in and answers
// it with members, Redis's list as of version, merged with this node's
// members whose join may not be flushed yet, and p itself. Member events
// that list holds already are not sent to s (listed).
func (s *socket) presenceReply(sc *scratch, ch string, p presence, members map[string]json.RawMessage, version int64) error {
	if members == nil {
		members = map[string]json.RawMessage{}
	}
	p.listed = &listed{version: version}
	s.node.index.each(chanKey{s.app.Load().ID, ch}, func(_ *socket, q presence) {
		if _, ok := members[q.user]; !ok && q.user != "" {
			members[q.user] = q.info
			if p.listed.pending == nil {
				p.listed.pending = map[string]bool{}
			}
			p.listed.pending[q.user] = true
		}
	})
	s.join(ch, p)
	members[p.user] = p.info
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	sc.out = protocol.AppendPresenceSucceeded(sc.out[:0], ch, ids, members)
	if err := s.reply(sc.out); err != nil {
		return err
	}
	return s.afterJoin(sc, ch)
}

// signin handles pusher:signin: the auth signs socket_id::user::user_data.
// A failure is a pusher:error with code 4009 and the socket stays open (so
// a page that signs in later still has its subscriptions).
func (s *socket) signin(sc *scratch, f protocol.Frame) error {
	a := s.node
	si, err := f.Signin()
	if err != nil {
		a.m.errors[reasonMalformed].Inc()
		return s.sendError(sc, err)
	}
	fail := func(msg string) error {
		a.m.errors[reasonAuth].Inc()
		return s.sendError(sc, &protocol.Error{Code: protocol.CodeUnauthorized, Message: "Sign-in refused: " + msg})
	}
	if err := auth.CheckSigninAuth(s.app.Load(), s.id, si.UserData, si.Auth); err != nil {
		return fail(err.Error())
	}
	m, err := protocol.ParseUserData(si.UserData)
	if err != nil {
		return fail(err.Error())
	}
	watch, err := protocol.ParseWatchlist(si.UserData)
	if err != nil {
		return fail(err.Error())
	}
	if n := utf8.RuneCountInString(m.UserID); n > maxUserIDLength {
		return fail("user id is " + strconv.Itoa(n) + " characters long, over the limit of " + strconv.Itoa(maxUserIDLength))
	}
	if s.user != nil && s.user.UserID != m.UserID {
		return fail("this connection is already signed in as user " + portcap.Clip(s.user.UserID))
	}
	first := s.user == nil
	if first {
		s.watchTerminate(m.UserID)
		// Online, for the watchlists of others: a member of the app's
		// signed-in channel while any socket of the user is signed in.
		a.rec.AddMember(s.app.Load().ID, protocol.SignedInChannel, m.UserID, nil, 1)
	}
	s.user = &m
	s.authBy.Store(0)
	sc.out = protocol.AppendSigninSuccess(sc.out[:0], si.UserData)
	if err := s.reply(sc.out); err != nil || !first || len(watch) == 0 {
		// A repeated signin (same user) keeps the first one's watchlist.
		return err
	}
	if len(watch) > protocol.MaxWatchlist {
		a.m.errors[reasonWatchlistLimit].Inc()
		if err := s.sendError(sc, watchlistTooLong(len(watch))); err != nil {
			return err
		}
		watch = watch[:protocol.MaxWatchlist]
	}
	s.watchUsers(watch)
	return nil
}

// clientEvent relays a client-* event to the channel's other subscribers
// on every node, following Pusher's rules (private and presence channels
// only, never echoed to the sender, rate-limited per socket).
func (s *socket) clientEvent(sc *scratch, f protocol.Frame) error {
	a := s.node
	refuse := func(code protocol.Code, msg string) error {
		a.m.errors[reasonClientEvent].Inc()
		return s.sendError(sc, &protocol.Error{Code: code, Message: msg})
	}
	if !s.app.Load().EnableClientMessages {
		return refuse(protocol.CodeNone, "To send client events, enable client messages for app "+s.app.Load().ID)
	}
	kind := protocol.ChannelKind(f.Channel)
	switch {
	case f.Channel == "":
		return refuse(protocol.CodeNone, "Client event "+portcap.Clip(f.Event)+" has no channel")
	case kind.Encrypted():
		return refuse(protocol.CodeNone, "Client events cannot be sent on encrypted channels")
	case !kind.AllowsClientEvents():
		return refuse(protocol.CodeNone, "Client events are only allowed on private and presence channels, not "+portcap.Clip(f.Channel))
	case len(f.Event) > maxClientEventNameLen:
		return refuse(protocol.CodeNone, "Client event name is over "+strconv.Itoa(maxClientEventNameLen)+" characters")
	}
	i := s.subIndex(f.Channel)
	if i < 0 {
		return refuse(protocol.CodeNone, "Client event on "+portcap.Clip(f.Channel)+" refused: this connection is not subscribed to it")
	}
	data := f.EventData()
	if limit := kb(s.app.Load().MaxEventPayloadInKb, defaultMaxEventKB); len(data) > limit {
		return refuse(protocol.CodeNone, "Client event data is "+strconv.Itoa(len(data))+" bytes, over the limit of "+strconv.Itoa(limit))
	}
	if !s.allowClientEvent() {
		a.limits.Rejected(s.app.Load().ID, ratelimit.ClientEvents)
		return refuse(protocol.CodeClientEventRateLimit, "Client event rate limit reached: at most "+strconv.Itoa(s.app.Load().ClientEventsPerSecond())+" per second (maxClientEventsPerSecond)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	defer cancel()
	// Never echoed; user_id only on presence channels (member.user is
	// empty elsewhere).
	err := a.bus.Publish(ctx, s.app.Load().ID, fanout.Message{Channel: f.Channel, Event: f.Event, Data: data,
		UserID: s.subs[i].member.user, ExceptSocket: s.id, Keep: s.app.Load().HistoryFor(f.Channel)})
	if err != nil {
		a.m.errors[reasonPublish].Inc()
		a.log.Warn("cannot publish client event", "app", s.app.Load().ID, "channel", f.Channel, "error", err)
		return refuse(protocol.CodeNone, "Client event could not be delivered; try again")
	}
	a.m.clientEvents.Inc()
	if webhook.Wants(s.app.Load(), webhook.ClientEvent) {
		a.hooks.Enqueue(s.app.Load(), webhook.Event{Name: webhook.ClientEvent, Channel: f.Channel, Event: f.Event,
			Data: data, SocketID: s.id, UserID: s.subs[i].member.user})
	}
	return nil
}

// allowClientEvent is a token bucket of the app's
// maxClientEventsPerSecond per socket, as soketi limits them per socket,
// on the hub's coarse clock: no timer, two integers per socket. Tokens are
// counted in thousandths of an event.
func (s *socket) allowClientEvent() bool {
	const unit = 1000
	rate := int64(s.app.Load().ClientEventsPerSecond())
	if rate == 0 {
		return true // the app set no limit
	}
	now := s.node.hub.now.Load()
	if s.tokensAt == 0 {
		s.tokens = rate * unit
	} else {
		// (now - tokensAt) ms × rate events/s = that many thousandths.
		s.tokens = min(rate*unit, s.tokens+(now-s.tokensAt)*rate)
	}
	s.tokensAt = now
	if s.tokens < unit {
		return false
	}
	s.tokens -= unit
	return true
}

// route is the bus's callback: a message on a node-internal channel is a
// control message for the node (control), any other an event for the
// channel's subscribers (deliver).
func (a *App) route(app string, m fanout.Message) {
	a.m.busIn.Inc()
	if strings.HasPrefix(m.Channel, protocol.InternalPrefix) {
		a.control(app, m)
		return
	}
	a.deliver(app, m)
}

// control acts on a control message: a terminate_connections order for a
// user's sockets, a watched user's online edge, a capacity-limited
// channel's waiting list that moved.
func (a *App) control(app string, m fanout.Message) {
	if strings.HasPrefix(m.Channel, protocol.TerminateUserPrefix) {
		a.index.each(chanKey{app, m.Channel}, func(s *socket, _ presence) { s.terminate() })
	} else if user, ok := strings.CutPrefix(m.Channel, protocol.WatchUserPrefix); ok {
		a.watchEdge(app, m.Channel, user, m.Event == protocol.WatchlistOnline)
	} else if ch, ok := strings.CutPrefix(m.Channel, protocol.AdmissionPrefix); ok {
		a.listMoved(app, ch)
	}
}

// deliver encodes an event once and queues the same bytes on every local
// subscriber of the channel, except the sender's socket and the sockets of
// the excepted user. Queueing never blocks: a subscriber that cannot keep
// up is disconnected instead.
func (a *App) deliver(app string, m fanout.Message) {
	member, added := "", m.Event == protocol.EventMemberAdded
	switch {
	case m.Version <= 0:
	case added || m.Event == protocol.EventMemberRemoved:
		member = memberOf(m.Data)
	case !a.index.newer(chanKey{app, m.Channel}, m.Version):
		a.m.superseded.Inc() // a count older than one delivered already
		return
	}
	var one []frame // the frame, built for the first subscriber and shared (push)
	d := delivery{channel: m.Channel, cache: protocol.IsCacheChannel(m.Channel) && cacheable(m.Event), serial: m.Serial}
	woken := a.woken[:0]
	a.index.each(chanKey{app, m.Channel}, func(s *socket, p presence) {
		if s.id == m.ExceptSocket || (m.ExceptUser != "" && p.user == m.ExceptUser) {
			return
		}
		if member != "" && !p.listed.news(member, added, m.Version) {
			return // its subscription_succeeded said so
		}
		if one == nil {
			one = []frame{framed(protocol.Message{Event: m.Event, Channel: m.Channel, Data: m.Data, UserID: m.UserID}.AppendTo(
				newPayload(len(m.Event) + len(m.Channel) + len(m.Data) + len(m.UserID) + 64)))}
		}
		if _, wake := s.queueDelivery(one, d); wake {
			woken = append(woken, s)
		}
	})
	inMemoryOrder(woken)
	a.send.pushAll(woken)
	clear(woken) // the scratch holds no socket past the delivery
	a.woken = woken[:0]
}

// inMemoryOrder sorts ss by address. The index yields a channel's
// subscribers in a map's random order; sockets accepted together sit
// together in the heap and in the kernel's slabs, and a reader on the same
// machine (a co-located client, a proxy) made its ends in that order too,
// so a burst written in memory order misses the caches less on both sides
// (docs/TRANSPORT.md, "Write order"). It costs O(n log n) compares of
// addresses, about 0.5 ms for 5,000 sockets in random order and 5.5 ms for
// 50,000: a hundredth of writing them, at about 11 us of system call each.
func inMemoryOrder(ss []*socket) {
	slices.SortFunc(ss, func(x, y *socket) int {
		return cmp.Compare(uintptr(unsafe.Pointer(x)), uintptr(unsafe.Pointer(y))) //nolint:gosec // G103: an address compared, never dereferenced
	})
}

// memberOf is the user_id of a member event's data.
func memberOf(data string) string {
	var d struct {
		UserID string `json:"user_id"`
	}
	_ = json.Unmarshal([]byte(data), &d)
	return d.UserID
}

// watchTerminate makes s, just signed in as user, reachable by the HTTP
// API's terminate_connections: it joins the user's internal terminate
// channel, in the index (so deliver finds the socket) and on the bus (so
// Redis routes the order to this node). Like a subscription it costs no
// goroutine or timer; closed undoes it. The channel is not counted.
func (s *socket) watchTerminate(user string) {
	a := s.node
	ch := protocol.TerminateUserChannel(user)
	a.index.add(chanKey{s.app.Load().ID, ch}, s, presence{})
	a.bus.Join(s.app.Load().ID, ch)
}

// unwatchTerminate undoes watchTerminate for a signed-in socket.
func (s *socket) unwatchTerminate() {
	a := s.node
	ch := protocol.TerminateUserChannel(s.user.UserID)
	a.index.remove(chanKey{s.app.Load().ID, ch}, s)
	a.bus.Leave(s.app.Load().ID, ch)
}

// terminate closes s on the HTTP API's order: pusher:error 4009 and then
// close code 4009 (Pusher's terminate_connections), which pusher-js treats as refused
// and does not reconnect from. It is called from the bus's callback
// (control), so the write and close handshake never wait there (whenSlot),
// as closeAsync's do; frames still queued for s are dropped.
func (s *socket) terminate() {
	if s.refuseNow(&protocol.Error{Code: protocol.CodeUnauthorized, Message: "Connection terminated by the server: terminate_connections for this user"}) {
		s.node.m.terminated.Inc()
	}
}

// refuseNow closes s as refuse does, from any goroutine: pusher:error with perr's code,
// then that close code, dropping what is still queued for s. It reports
// false if s was being closed already.
func (s *socket) refuseNow(perr *protocol.Error) bool {
	if !s.closing.CompareAndSwap(false, true) {
		return false // being closed already
	}
	s.mu.Lock()
	s.kill()
	s.mu.Unlock()
	// The link keeps frames whole, so a writer finishing an earlier frame
	// cannot interleave with this one.
	s.whenSlot(func() { s.refuse(perr) })
	return true
}
