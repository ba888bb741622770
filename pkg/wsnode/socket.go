package wsnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/protocol"
)

// scratch holds one frame's input and output. Sockets borrow one per frame
// from a pool, so an idle socket holds no buffer.
type scratch struct {
	in  bytes.Buffer
	out []byte
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

// serveWS upgrades a connection to /app/{key} and runs its read loop on
// this, the handler's, goroutine: the socket's only goroutine.
func (a *App) serveWS(w http.ResponseWriter, r *http.Request) {
	if !a.hub.enter() {
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer a.hub.leave()

	// The id is set before the socket is shared with the sweeper and drain.
	s := &socket{id: a.ids.Next()}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Pusher accepts any origin: apps restrict access with channel
		// auth, not origins.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
		OnPingReceived: func(context.Context, []byte) bool {
			s.lastSeen.Store(a.hub.now.Load())
			return true
		},
	})
	if err != nil {
		// Accept has answered with an HTTP error already.
		a.log.Debug("websocket upgrade failed", "remote_addr", r.RemoteAddr, "error", err)
		return
	}
	s.conn = c
	c.SetReadLimit(a.tun.readLimit)
	if !a.hub.add(s) {
		_ = c.Close(websocket.StatusCode(protocol.CodeReconnect), "server shutting down")
		return
	}

	app, perr, reason := a.admit(r)
	if perr != nil {
		a.m.errors[reason].Inc()
		a.refuse(s, perr)
		a.hub.remove(s)
		return
	}
	s.app = app
	a.m.open.Inc()
	a.m.total.Inc()
	// Deferred so that even a panic (which net/http recovers) uncounts the
	// socket's channels: a leaked +1 would stay in Redis until restart.
	defer func() { a.closed(s, err) }()
	err = a.serveSocket(s)
}

// admit checks the app key and protocol version; on refusal it returns the
// error to send (its code is also the close code) and the metric reason.
func (a *App) admit(r *http.Request) (*apps.App, *protocol.Error, string) {
	key := r.PathValue("key")
	app := a.cfg.Apps.ByKey(key)
	switch {
	case app == nil:
		return nil, &protocol.Error{Code: protocol.CodeAppNotFound, Message: "App key " + clip(key) + " does not exist"}, errAppNotFound
	case !app.Enabled:
		return nil, &protocol.Error{Code: protocol.CodeAppDisabled, Message: "App " + app.ID + " is disabled"}, errAppDisabled
	}
	v := r.URL.Query().Get("protocol")
	if v == "" {
		return nil, &protocol.Error{Code: protocol.CodeNoProtocol, Message: "No protocol version given: connect with ?protocol=7"}, errBadProtocol
	}
	if n, err := strconv.Atoi(v); err != nil || n < minProtocol || n > maxProtocol {
		return nil, &protocol.Error{Code: protocol.CodeUnsupportedProtocol, Message: "Unsupported protocol version " + clip(v) + ": this server speaks 5 to 7"}, errBadProtocol
	}
	return app, nil, ""
}

// Protocol versions accepted; pusher-js sends 7.
const minProtocol, maxProtocol = 5, 7

// closeReasons are the close frame reasons, fixed so no client input ends
// up in a close frame (whose reason is limited to 123 bytes).
var closeReasons = map[protocol.Code]string{
	protocol.CodeAppNotFound:         "app not found",
	protocol.CodeAppDisabled:         "app disabled",
	protocol.CodeNoProtocol:          "no protocol version",
	protocol.CodeUnsupportedProtocol: "unsupported protocol version",
}

// refuse sends pusher:error with perr's code, then closes with that code,
// as soketi and reverb do; pusher-js acts on either.
func (a *App) refuse(s *socket, perr *protocol.Error) {
	var buf [256]byte
	if err := a.write(s, perr.AppendTo(buf[:0])); err == nil {
		_ = s.conn.Close(websocket.StatusCode(perr.Code), closeReasons[perr.Code])
	}
	_ = s.conn.CloseNow()
}

func (a *App) serveSocket(s *socket) error {
	var buf [128]byte
	if err := a.write(s, protocol.AppendConnectionEstablished(buf[:0], s.id, protocol.ActivityTimeout)); err != nil {
		return err
	}
	for {
		// No deadline on the read: the sweeper closes silent sockets, so
		// the read path arms no timer.
		typ, rd, err := s.conn.Reader(context.Background())
		if err != nil {
			return err
		}
		sc := scratchPool.Get().(*scratch)
		sc.in.Reset()
		if _, err := sc.in.ReadFrom(rd); err != nil {
			putScratch(sc)
			return err
		}
		s.lastSeen.Store(a.hub.now.Load())
		if typ == websocket.MessageText {
			err = a.onFrame(s, sc)
		} else {
			a.m.received[frameBinary].Inc()
			err = a.sendError(s, sc, &protocol.Error{Message: "Binary frames are not supported: send JSON text frames"})
		}
		putScratch(sc)
		if err != nil {
			return err
		}
	}
}

func (a *App) onFrame(s *socket, sc *scratch) error {
	f, err := protocol.Decode(sc.in.Bytes())
	if err != nil {
		a.m.received[frameMalformed].Inc()
		a.m.errors[errMalformed].Inc()
		return a.sendError(s, sc, err)
	}
	switch f.Event {
	case protocol.EventPing:
		a.m.received[framePing].Inc()
		return a.write(s, protocol.Pong)
	case protocol.EventPong:
		a.m.received[framePong].Inc()
		return nil
	case protocol.EventSubscribe:
		a.m.received[frameSubscribe].Inc()
		return a.subscribe(s, sc, f)
	case protocol.EventUnsubscribe:
		a.m.received[frameUnsubscribe].Inc()
		return a.unsubscribe(s, sc, f)
	case protocol.EventSignin:
		a.m.received[frameSignin].Inc()
		a.m.errors[errUnsupportedEvent].Inc()
		return a.sendError(s, sc, &protocol.Error{Message: "User authentication (pusher:signin) is not supported by this server yet"})
	}
	a.m.errors[errUnsupportedEvent].Inc()
	if strings.HasPrefix(f.Event, protocol.ClientEventPrefix) {
		a.m.received[frameClientEvent].Inc()
		return a.sendError(s, sc, &protocol.Error{Message: "Client events are not supported by this server yet"})
	}
	a.m.received[frameOther].Inc()
	return a.sendError(s, sc, &protocol.Error{Message: "Unsupported event " + clip(f.Event)})
}

func (a *App) subscribe(s *socket, sc *scratch, f protocol.Frame) error {
	sub, err := f.Subscribe()
	if err != nil {
		a.m.errors[errMalformed].Inc()
		return a.sendError(s, sc, err)
	}
	ch := sub.Channel
	if err := protocol.ValidateChannelName(ch); err != nil {
		a.m.errors[errInvalidChannel].Inc()
		return a.sendError(s, sc, &protocol.Error{Message: "Invalid channel name: " + err.Error()})
	}
	if protocol.ChannelKind(ch) != protocol.KindPublic {
		a.m.errors[errUnsupportedChan].Inc()
		return a.sendError(s, sc, &protocol.SubscriptionError{
			Channel: ch, Type: protocol.SubscriptionUnsupported, Status: http.StatusNotImplemented,
			Message: "private, presence, encrypted and user channels are not supported by this server yet",
		})
	}
	// A repeated subscribe is answered again but counted once.
	if !slices.Contains(s.channels, ch) {
		if len(s.channels) >= a.tun.maxChannels {
			a.m.errors[errChannelLimit].Inc()
			return a.sendError(s, sc, &protocol.SubscriptionError{
				Channel: ch, Type: protocol.SubscriptionLimit, Status: http.StatusBadRequest,
				Message: "this connection is already subscribed to " + strconv.Itoa(a.tun.maxChannels) + " channels",
			})
		}
		s.channels = append(s.channels, ch)
		a.rec.Add(s.app.ID, ch, 1)
		a.m.subscriptions.Inc()
	}
	sc.out = protocol.AppendSubscriptionSucceeded(sc.out[:0], ch)
	return a.write(s, sc.out)
}

func (a *App) unsubscribe(s *socket, sc *scratch, f protocol.Frame) error {
	ch, err := f.Unsubscribe()
	if err != nil {
		a.m.errors[errMalformed].Inc()
		return a.sendError(s, sc, err)
	}
	// Pusher sends no reply, and none for a channel that was not subscribed.
	if i := slices.Index(s.channels, ch); i >= 0 {
		last := len(s.channels) - 1
		s.channels[i] = s.channels[last]
		s.channels[last] = ""
		s.channels = s.channels[:last]
		a.rec.Add(s.app.ID, ch, -1)
		a.m.subscriptions.Dec()
	}
	return nil
}

// appender is a wire error: *protocol.Error or *protocol.SubscriptionError.
type appender interface{ AppendTo([]byte) []byte }

// sendError tells the client about err; the socket stays open.
func (a *App) sendError(s *socket, sc *scratch, err error) error {
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
	return a.write(s, sc.out)
}

// write sends one frame. The sweeper watches writeSince, so a client that
// stops reading is cut after writeTimeout without a timer per write.
func (a *App) write(s *socket, b []byte) error {
	s.writeSince.Store(a.hub.now.Load())
	err := s.conn.Write(context.Background(), websocket.MessageText, b)
	s.writeSince.Store(0)
	if err != nil {
		a.m.errors[errWrite].Inc()
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// closed releases a socket after its read loop ended: its subscriptions
// are uncounted before the handler reports done, so the drain can wait for
// every decrement before the node's contribution is removed.
func (a *App) closed(s *socket, err error) {
	for _, ch := range s.channels {
		a.rec.Add(s.app.ID, ch, -1)
	}
	a.m.subscriptions.Sub(float64(len(s.channels)))
	a.m.open.Dec()
	a.hub.remove(s)
	_ = s.conn.CloseNow()
	if errors.Is(err, websocket.ErrMessageTooBig) {
		a.m.errors[errFrameTooBig].Inc()
	}
	if a.log.IsDebug() {
		a.log.Debug("socket closed", "socket_id", s.id, "app", s.app.ID, "channels", len(s.channels), "close_status", int(websocket.CloseStatus(err)), "error", err)
	}
	s.channels = nil
}

// clip shortens client input quoted in an error message.
func clip(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit] + "...")
	}
	return strconv.Quote(s)
}
