package wsnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/portcap"
	"github.com/headcount/headcount/pkg/protocol"
)

// socket is one client connection, and what the node does for one
// connection is its methods: this file follows its life (open,
// serveMessage and the handlers of its frames, closed); sender.go holds
// its send queue, and each topic file its steps of the topic (channels.go:
// presence, signin, client events, terminate; admission.go, cache.go,
// watchlist.go, appchannels.go, apps.go). What acts on the node or on many
// sockets is App's. link is the socket's transport.
//
// Only the socket's handler, one message at a time, touches the fields
// above mu; writers and deliveries use mu and the atomics, other
// goroutines the link's own methods.
type socket struct {
	// node is the node that serves the socket.
	node *App
	id   string
	// app is nil until the handshake accepted the app; a reload of the
	// apps replaces it (refreshApp).
	app   atomic.Pointer[apps.App]
	link  link
	shard uint32
	// closing is set once the node started closing the socket.
	closing atomic.Bool
	// subs is small (pusher-js apps subscribe to a handful); a slice costs
	// less per socket than a map.
	subs []sub
	// user is the signed-in user (pusher:signin), or nil.
	user *protocol.Member
	// watch is the signed-in user's watchlist (watchlist.go), or nil.
	watch *watchlist
	// waiting lists the capacity-limited channels this socket waits for
	// (admission.go); nearly always nil. A pointer, to keep the socket in
	// its size class.
	waiting *[]string
	// resume holds the id the page connected with (/r/{id}/app/{key},
	// wsfront.ParsePath), the same across its reconnects, and what the
	// socket was written of history channels (replay.go); nil without an
	// id, so that such a socket costs nothing more.
	resume *resumable
	// tokens (in thousandths of a client event) and tokensAt (hub clock)
	// are the client-event rate limiter's bucket.
	tokens   int64
	tokensAt int64
	// frames and framesAt (hub clock, unix seconds) are the frame rate
	// limiter's bucket (allowFrame): 8 bytes that were padding, so a socket
	// costs what it did. The read path alone touches them (the event
	// loop, or the socket's goroutine), since it counts every frame,
	// control frames too, before any is acted on.
	frames   int32
	framesAt uint32

	// lastSeen is the hub clock (unix ms) at the last frame received.
	lastSeen atomic.Int64
	// writeSince is the hub clock when the write in progress started, or 0.
	writeSince atomic.Int64
	// authBy is the time (Unix ms) by which a socket of an app that requires
	// user authentication must be authorized (signed in, or subscribed to
	// a private or presence channel), or 0 once it is or need not be.
	authBy atomic.Int64

	// mu guards the send queue.
	mu lockorder.Mutex[lockorder.Leaf]
	// queue holds frames waiting for a writer; queued is their total size.
	queue  []frame
	queued int
	// room, made by a handler waiting for its replies to fit, is closed
	// when a writer takes the queue or the socket dies.
	room chan struct{}
	// replyBytes and replies are the part of the queue that answers the
	// socket's own frames (sender.go: they have a budget of their own).
	// replies is at most maxQueueFrames: an int32, it shares a word with
	// scheduled and dead, which keeps the socket in its size class (240).
	replyBytes int
	replies    int32
	// scheduled is true while the socket is on the sender's ready list or
	// a writer is flushing it.
	scheduled bool
	// dead is set when the socket is closed or being closed: nothing more
	// is queued.
	dead bool
	// pending is the cache channel this socket is subscribing to, from its
	// join until its cached event or cache_miss is queued (cache.go), or
	// the history channel whose replay holds its live deliveries
	// (replay.go), or nil.
	pending *chanWait
}

// sub is one subscription: the channel and, on presence channels, the
// member the socket joined as.
type sub struct {
	channel string
	member  presence
}

// scratch holds one frame's input and output. Sockets borrow one per frame
// from a pool, so an idle socket holds no buffer.
type scratch struct {
	in  bytes.Buffer
	out []byte
	// held is set by a read path that can see the socket's next message
	// (the event loop's inbox): a run of subscribes shares it.
	held *heldAnswers
}

// heldAnswers are the subscription_succeeded answers of a run of
// subscribes (pusher-js sends every subscribe of a page in one burst),
// held so that one wait for the bus covers all of their channels: waited
// for one by one, a burst of channels new to the node cost a Redis round
// trip each, in a row. The answers go, in order, before any other reply
// of the socket (answerHeld).
type heldAnswers struct {
	channels []string
	// more: another subscribe is queued behind the message being handled.
	more bool
}

var scratchPool = sync.Pool{New: func() any { return &scratch{out: make([]byte, 0, 512)} }}

// maxPooledBuffer keeps a rare large frame from pinning memory in the pool.
const maxPooledBuffer = 64 << 10

func putScratch(sc *scratch) {
	if sc.in.Cap() > maxPooledBuffer || cap(sc.out) > maxPooledBuffer {
		return
	}
	scratchPool.Put(sc)
}

// newSocket is the socket for r, before the hub has it.
func (a *App) newSocket(r *http.Request) *socket {
	s := &socket{node: a, id: protocol.NewSocketID()}
	if _, id := requestPath(r); id != "" {
		s.resume = &resumable{id: id}
	}
	return s
}

// open admits s, a socket just upgraded for r and added to the hub: the
// app, the protocol version and the app's connection quota. On a refusal
// it answers the Pusher way, removes s from the hub and reports false;
// else s is counted and open.
func (s *socket) open(r *http.Request) bool {
	a := s.node
	app, perr, reason := a.admit(r)
	if perr == nil {
		if perr = a.checkConnectionLimit(app); perr != nil {
			reason = reasonConnectionLimit
		}
	}
	if perr != nil {
		a.m.errors[reason].Inc()
		s.refuse(perr)
		a.m.disconnected(endCode(s.link, nil))
		a.hub.remove(s)
		return false
	}
	s.app.Store(app)
	if app.EnableUserAuthentication {
		// From the wall clock, not the hub's, which is as old as the last
		// sweep and older when the sweeper waits for a core: the socket
		// must not be closed before its whole timeout.
		s.authBy.Store(time.Now().UnixMilli() + a.cfg.UserAuthTimeout.Milliseconds())
	}
	if s.resume != nil {
		a.resumers.add(s)
	}
	a.rec.AddConnections(app.ID, 1)
	a.m.open.Inc()
	a.m.total.Inc()
	s.refreshApp()
	return true
}

// connectionEstablished is the socket's first frame.
func connectionEstablished(buf []byte, id string) frame {
	return framed(protocol.AppendConnectionEstablished(buf[:headroom], id, protocol.ActivityTimeout))
}

// closeReasons are the close frame reasons, fixed so no client input ends
// up in a close frame (whose reason is limited to 123 bytes).
var closeReasons = map[protocol.Code]string{
	protocol.CodeAppNotFound:         "app not found",
	protocol.CodeAppDisabled:         "app disabled",
	protocol.CodeNoProtocol:          "no protocol version",
	protocol.CodeUnsupportedProtocol: "unsupported protocol version",
	protocol.CodeOverConnectionQuota: "over connection quota",
	protocol.CodeUnauthorized:        "unauthorized",
	protocol.CodeOverCapacity:        "too many frames",
}

// refuse sends pusher:error with perr's code, then closes with that code,
// as soketi and reverb do; pusher-js acts on either.
func (s *socket) refuse(perr *protocol.Error) {
	var buf [headroom + 256]byte
	if err := s.write(framed(perr.AppendTo(buf[:headroom]))); err == nil {
		s.link.shut(perr.Code, closeReasons[perr.Code])
		return
	}
	s.link.cut()
}

// frameBudget is the one rule of how many frames a socket of app may send:
// a burst, then a steady rate per second. The burst fits what pusher-js
// sends at once, on a reconnect a signin, a subscribe for every channel of
// the page and a ping, with room to leave and rejoin every channel in the
// same second: three frames per channel, and a second's rate. pusher-js
// sends every channel of the page, not only those its connection may hold,
// so the burst is sized for at least the default cap
// (apps.DefaultMaxChannelsPerConnection), and for the app's cap where it
// set a higher one: a page past its cap has the excess refused, never its
// connection cut (and cut again after each reconnect). The rate is the
// app's client events and 10 more (subscribes, unsubscribes, pings); with
// client events unlimited, 1,000 (half what Ably closes a connection at).
func frameBudget(app *apps.App) (rate, burst int64) {
	rate = int64(app.ClientEventsPerSecond())
	if rate == 0 || rate > 1000 {
		rate = 1000
	}
	rate += 10
	channels := max(app.ChannelsPerConnection(), apps.DefaultMaxChannelsPerConnection)
	return rate, 3*int64(channels) + rate
}

// allowFrame takes one frame from s's bucket (frameTokens), if it holds
// one.
func (s *socket) allowFrame() bool {
	if s.frameTokens() <= 0 {
		return false
	}
	s.frames--
	return true
}

// frameTokens refills s's token bucket of frames (frameBudget) on the
// hub's coarse clock, in whole frames and seconds (no timer, and two
// 4-byte fields per socket), and returns how many frames it holds. Every
// frame counts: each of a message's frames, pings, pongs and closes, so
// that no frame a client sends costs the node work (a pong, a decode)
// outside the budget.
func (s *socket) frameTokens() int32 {
	a := s.node
	rate, burst := a.tun.frameBudget(s.app.Load())
	now := uint32(a.hub.now.Load() / 1000) //nolint:gosec // G115: unix seconds fit until 2106, and only differences are used
	if s.framesAt == 0 {
		s.frames = int32(burst) //nolint:gosec // G115: a burst is at most 31,010
	} else if now != s.framesAt {
		// A clock set back refills the bucket (now-framesAt wraps).
		s.frames = int32(min(burst, int64(s.frames)+int64(now-s.framesAt)*rate)) //nolint:gosec // G115: at most the burst
	}
	s.framesAt = now
	return s.frames
}

// errFrameRate ends the read loop of a socket over its frame rate (the
// read path found it; the socket's handler answers with overFrameRate).
var errFrameRate = errors.New("over the frame rate")

// overFrameRate closes s, whose client sends more frames than any Pusher
// client does: pusher:error and close code 4100, on which pusher-js backs
// off a second and reconnects (with a full bucket, into which its whole
// resubscription fits). Dropping the frames instead would desynchronise
// the client (a subscribe never answered, an unsubscribe not done) and still
// cost the node a read per frame; 43xx close codes would make pusher-js
// give up for good, 42xx reconnect at once.
func (s *socket) overFrameRate() error {
	a := s.node
	a.m.errors[reasonFrameRate].Inc()
	if s.closing.CompareAndSwap(false, true) {
		rate, burst := a.tun.frameBudget(s.app.Load())
		s.mu.Lock()
		s.kill()
		s.mu.Unlock()
		s.refuse(&protocol.Error{Code: protocol.CodeOverCapacity, Message: "Too many frames: at most " +
			strconv.FormatInt(burst, 10) + " at once and " + strconv.FormatInt(rate, 10) + " frames per second after that; reconnect after a second"})
	}
	return errFrameRate
}

// serveMessage handles a whole message s's client sent, in sc.in: text
// (else binary). Either transport's read path calls it, one message of a
// socket at a time.
func (s *socket) serveMessage(sc *scratch, text bool) error {
	a := s.node
	s.lastSeen.Store(a.hub.now.Load())
	if text {
		if !utf8.Valid(sc.in.Bytes()) {
			_ = s.answerHeld(sc)
			return s.invalidUTF8()
		}
		return s.onFrame(sc)
	}
	a.m.received[frameBinary].Inc()
	return s.sendError(sc, &protocol.Error{Message: "Binary frames are not supported: send JSON text frames"})
}

// errInvalidUTF8 ends a socket that sent a text message that is not UTF-8.
var errInvalidUTF8 = errors.New("text message is not valid UTF-8")

// invalidUTF8 closes s with 1007 (RFC 6455 §8.1: a text message must be
// UTF-8, and an endpoint that receives one that is not fails the
// connection). Neither transport's framing checks it, so the node does,
// on the whole message: a character may span two fragments. Relayed in a client event, such bytes would make every
// browser that receives them close its own connection.
func (s *socket) invalidUTF8() error {
	a := s.node
	a.m.received[frameMalformed].Inc()
	a.m.errors[reasonInvalidUTF8].Inc()
	if s.closing.CompareAndSwap(false, true) {
		s.link.shut(closeInvalidPayload, "text message is not valid UTF-8")
	}
	return errInvalidUTF8
}

func (s *socket) onFrame(sc *scratch) error {
	a := s.node
	f, err := protocol.Decode(sc.in.Bytes())
	if err != nil {
		a.m.received[frameMalformed].Inc()
		a.m.errors[reasonMalformed].Inc()
		return s.sendError(sc, err)
	}
	if f.Event != protocol.EventSubscribe {
		if err := s.answerHeld(sc); err != nil {
			return err
		}
	}
	switch f.Event {
	case protocol.EventPing:
		a.m.received[framePing].Inc()
		return s.queueReply(pongFrame)
	case protocol.EventPong:
		a.m.received[framePong].Inc()
		s.ponged()
		return nil
	case protocol.EventSubscribe:
		a.m.received[frameSubscribe].Inc()
		return s.subscribe(sc, f)
	case protocol.EventUnsubscribe:
		a.m.received[frameUnsubscribe].Inc()
		return s.unsubscribe(sc, f)
	case protocol.EventSignin:
		a.m.received[frameSignin].Inc()
		return s.signin(sc, f)
	}
	if strings.HasPrefix(f.Event, protocol.ClientEventPrefix) {
		a.m.received[frameClientEvent].Inc()
		return s.clientEvent(sc, f)
	}
	a.m.errors[reasonUnsupportedEvent].Inc()
	a.m.received[frameOther].Inc()
	return s.sendError(sc, &protocol.Error{Message: "Unsupported event " + portcap.Clip(f.Event)})
}

func (s *socket) subscribe(sc *scratch, f protocol.Frame) error {
	a := s.node
	sub, err := f.Subscribe()
	if err != nil {
		a.m.errors[reasonMalformed].Inc()
		return s.sendError(sc, err)
	}
	ch := sub.Channel
	if err := protocol.ValidateChannelNameMax(ch, s.app.Load().ChannelNameLimit()); err != nil {
		a.m.errors[reasonInvalidChannel].Inc()
		// A name over the app's limit gets the same pusher:error as any
		// invalid name (soketi sends a pusher:subscription_error of type
		// LimitReached, status 4009, instead), naming the limit.
		return s.sendError(sc, &protocol.Error{Message: "Invalid channel name: " + err.Error()})
	}
	// A repeated subscribe gets Pusher's answer, a pusher:error without a
	// code that leaves the subscription as it is (pusher-js only reports
	// it, and sends none itself: it subscribes again only on a new
	// connection). It is never answered again in full: a presence
	// channel's member list is up to 100 KB a time.
	if s.subIndex(ch) >= 0 {
		a.m.errors[reasonAlreadySubscribed].Inc()
		return s.sendError(sc, &protocol.Error{Message: "Existing subscription to channel " + ch})
	}
	if limit := s.app.Load().ChannelsPerConnection(); len(s.subs) >= limit {
		a.m.errors[reasonChannelLimit].Inc()
		return s.sendError(sc, &protocol.SubscriptionError{
			Channel: ch, Type: protocol.SubscriptionLimit, Status: http.StatusBadRequest,
			Message: "this connection is already subscribed to " + strconv.Itoa(limit) + " channels, its limit (maxChannelsPerConnection)",
		})
	}
	switch protocol.ChannelKind(ch) {
	case protocol.KindPrivate, protocol.KindEncrypted:
		// Encrypted channels are authorized like private ones; the server
		// only relays their ciphertext.
		if err := auth.CheckChannelAuth(s.app.Load(), s.id, ch, "", sub.Auth); err != nil {
			return s.authFailed(sc, ch, err)
		}
	case protocol.KindUser:
		if s.user == nil || ch[len(protocol.UserChannelPrefix):] != s.user.UserID {
			return s.authFailed(sc, ch, errors.New(protocol.UserChannelPrefix+" channels are only for the user this connection signed in as (pusher:signin)"))
		}
	case protocol.KindPresence:
		if err := s.answerHeld(sc); err != nil {
			return err
		}
		return s.subscribePresence(sc, sub)
	}
	if serr := s.allowChannel(ch); serr != nil {
		return s.sendError(sc, serr)
	}
	if _, replays := s.replayRule(ch); sc.held != nil && !protocol.IsCacheChannel(ch) && !replays {
		h := sc.held
		s.enter(ch, presence{})
		h.channels = append(h.channels, ch)
		if h.more {
			return nil
		}
		return s.answerHeld(sc)
	}
	if err := s.answerHeld(sc); err != nil {
		return err
	}
	s.join(ch, presence{})
	sc.out = protocol.AppendSubscriptionSucceeded(sc.out[:0], ch)
	if err := s.reply(sc.out); err != nil {
		return err
	}
	return s.afterJoin(sc, ch)
}

// afterJoin sends what follows ch's subscription_succeeded: a cache
// channel's cached event (cache.go), a history channel's replay
// (replay.go).
func (s *socket) afterJoin(sc *scratch, ch string) error {
	if protocol.IsCacheChannel(ch) {
		return s.sendCache(sc, ch)
	}
	return s.replay(sc, ch)
}

// answerHeld sends the held subscription_succeeded answers, once the bus
// has all of their channels (one wait). Every other reply of the socket
// calls it first, so answers keep the order of the frames they answer.
func (s *socket) answerHeld(sc *scratch) error {
	h := sc.held
	if h == nil || len(h.channels) == 0 {
		return nil
	}
	chans := h.channels
	h.channels = h.channels[:0]
	s.awaitJoined(chans...)
	for _, ch := range chans {
		sc.out = protocol.AppendSubscriptionSucceeded(sc.out[:0], ch)
		if err := s.reply(sc.out); err != nil {
			return err
		}
	}
	return nil
}

// join records a subscription (enter) and returns once the bus has the
// channel (awaitJoined), so the answer that follows it promises delivery.
func (s *socket) join(ch string, p presence) {
	s.enter(ch, p)
	s.awaitJoined(ch)
}

// enter records a subscription: socket list, counts, delivery index, bus.
// User channels are not counted (protocol.Kind.Counted).
func (s *socket) enter(ch string, p presence) {
	a := s.node
	s.subs = append(s.subs, sub{channel: ch, member: p})
	kind := protocol.ChannelKind(ch)
	if kind.NeedsAuth() {
		// An authorized subscription authorizes the connection, as
		// Pusher's authorized connections allow.
		s.authBy.Store(0)
	}
	if kind.Counted() {
		a.rec.Add(s.app.Load().ID, ch, 1)
	}
	if p.user != "" {
		a.rec.AddMember(s.app.Load().ID, ch, p.user, p.info, 1)
	}
	if protocol.IsCacheChannel(ch) {
		s.awaitCache(ch) // before deliveries can find s
	} else if _, replays := s.replayRule(ch); replays {
		s.awaitHistory(ch) // likewise
	}
	a.index.add(chanKey{s.app.Load().ID, ch}, s, p)
	// Per socket, not per first local subscriber: the bus is ref-counted,
	// so concurrent first-join and last-leave need no ordering here.
	a.bus.Join(s.app.Load().ID, ch)
	a.m.subscriptions.Inc()
}

// busJoinWait bounds how long a subscribe's answer waits for Redis to
// confirm the node's subscription to the channel (awaitJoined).
const busJoinWait = time.Second

// awaitJoined holds a subscribe's answer until Redis has confirmed this
// node's subscription to each of chans, so that a client holding its
// subscription_succeeded gets every event published after it, such as a
// client event another subscriber sends at once. Only the node's first
// subscriber of ch waits the round trip; later ones find it confirmed.
// Past busJoinWait the answer goes anyway: while the bus is down, delivery
// is at most once (package fanout), and the bus reports the outage.
func (s *socket) awaitJoined(chans ...string) {
	a := s.node
	ctx, cancel := context.WithTimeout(context.Background(), busJoinWait)
	defer cancel()
	if err := a.bus.WaitJoined(ctx, s.app.Load().ID, chans); err != nil {
		a.log.Debug("subscribed before the event bus confirmed the channel; events published meanwhile may not reach it",
			"app", s.app.Load().ID, "channels", chans, "error", err)
	}
}

// leave undoes join for s.subs[i].
func (s *socket) leave(i int) {
	a := s.node
	sb := s.subs[i]
	last := len(s.subs) - 1
	s.subs[i] = s.subs[last]
	s.subs[last] = sub{}
	s.subs = s.subs[:last]
	a.index.remove(chanKey{s.app.Load().ID, sb.channel}, s)
	a.bus.Leave(s.app.Load().ID, sb.channel)
	if protocol.ChannelKind(sb.channel).Counted() {
		a.rec.Add(s.app.Load().ID, sb.channel, -1)
	}
	if sb.member.user != "" {
		a.rec.AddMember(s.app.Load().ID, sb.channel, sb.member.user, nil, -1)
	}
	a.m.subscriptions.Dec()
}

func (s *socket) subIndex(ch string) int {
	for i := range s.subs {
		if s.subs[i].channel == ch {
			return i
		}
	}
	return -1
}

// authFailed answers a refused subscription with an AuthError (status 401)
// on the channel, as soketi does and pusher-js reports; the socket stays open.
func (s *socket) authFailed(sc *scratch, ch string, err error) error {
	s.node.m.errors[reasonAuth].Inc()
	return s.sendError(sc, &protocol.SubscriptionError{
		Channel: ch, Type: protocol.SubscriptionAuth, Status: http.StatusUnauthorized, Message: err.Error(),
	})
}

func (s *socket) unsubscribe(sc *scratch, f protocol.Frame) error {
	ch, err := f.Unsubscribe()
	if err != nil {
		s.node.m.errors[reasonMalformed].Inc()
		return s.sendError(sc, err)
	}
	// Pusher sends no reply, and none for a channel that was not subscribed.
	if i := s.subIndex(ch); i >= 0 {
		s.leave(i)
	}
	s.unwait(ch)
	return nil
}

// appender is a wire error: *protocol.Error or *protocol.SubscriptionError.
type appender interface{ AppendTo([]byte) []byte }

// sendError tells the client about err; the socket stays open.
func (s *socket) sendError(sc *scratch, err error) error {
	if herr := s.answerHeld(sc); herr != nil {
		return herr
	}
	var ap appender
	var perr *protocol.Error
	var serr *protocol.SubscriptionError
	switch {
	case errors.As(err, &perr):
		ap = perr
	case errors.As(err, &serr):
		ap = serr
	default:
		ap = &protocol.Error{Message: err.Error()}
	}
	sc.out = ap.AppendTo(sc.out[:0])
	return s.reply(sc.out)
}

// write sends one frame behind whatever is pending (link.write). Its
// callers: the handshake before the socket can receive deliveries, and the
// refusals.
func (s *socket) write(f frame) error {
	if err := s.link.write(f); err != nil {
		s.node.m.errors[reasonWrite].Inc()
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// closed releases a socket after its read loop ended: its subscriptions
// are uncounted before the handler reports done, so the drain can wait for
// every decrement before the node's contribution is removed.
func (s *socket) closed(err error) {
	a := s.node
	n := len(s.subs)
	for i := len(s.subs) - 1; i >= 0; i-- {
		s.leave(i)
	}
	if s.user != nil {
		s.unwatchTerminate()
		a.rec.AddMember(s.app.Load().ID, protocol.SignedInChannel, s.user.UserID, nil, -1)
	}
	if s.watch != nil {
		s.unwatchUsers()
	}
	for s.waiting != nil {
		s.unwait((*s.waiting)[0])
	}
	a.rec.AddConnections(s.app.Load().ID, -1)
	s.mu.Lock()
	s.kill()
	s.mu.Unlock()
	if s.resume != nil {
		s.saveResume()
	}
	a.m.open.Dec()
	a.hub.remove(s)
	s.link.release()
	if errors.Is(err, websocket.ErrMessageTooBig) {
		a.m.errors[reasonFrameTooBig].Inc()
	}
	code := endCode(s.link, err)
	a.m.disconnected(code)
	if a.log.IsDebug() {
		a.log.Debug("socket closed", "socket_id", s.id, "app", s.app.Load().ID, "channels", n, "close_status", code, "error", err)
	}
	s.subs = nil
}

// endCode is the close code a connection that ended with err (its read's
// error, or nil) is counted under: the close frame l sent, else the one
// the client sent, else 1006, none.
func endCode(l link, err error) uint16 {
	if c := l.sentClose(); c != 0 {
		return c
	}
	if c := websocket.CloseStatus(err); c >= 0 {
		return uint16(c) //nolint:gosec // G115: a close frame's code is 16 bits
	}
	return closeAbnormal
}
