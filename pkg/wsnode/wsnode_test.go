package wsnode_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/wsclient"
	"github.com/headcount/headcount/pkg/wsnode"
)

func TestHandshake(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c := dial(t, n.url(appKey, pusherJSQuery))
	f := read(t, c)
	require.Equal(t, "pusher:connection_established", f.Event)
	// data is a JSON string holding the object, as Pusher sends it, which
	// frame.data enforces.
	require.True(t, strings.HasPrefix(f.raw, `{"event":"pusher:connection_established","data":"{\"socket_id\":\"`), f.raw)
	d := f.data(t)
	require.Regexp(t, `^\d+\.\d+$`, d["socket_id"])
	require.Greater(t, d["activity_timeout"], 0.0)

	// Socket ids differ per connection.
	_, other := n.connect(t)
	require.NotEqual(t, d["socket_id"], other)
}

// A client may send frames before it has read the 101: they arrive in the
// handshake's segment, read by net/http before the socket is handed over,
// and must not be lost on the way.
func TestFramesBehindHandshake(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	early := append(wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":"early-1"}}`),
		wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":"early-2"}}`)...)
	c := dialRawSending(t, &net.Dialer{}, n.Addr(), "/app/"+appKey+pusherJSQuery, early)
	require.Contains(t, c.read(t), "pusher:connection_established")
	require.Contains(t, c.read(t), `"channel":"early-1"`)
	require.Contains(t, c.read(t), `"channel":"early-2"`)
}

// The socket reads its frames through its own chunked reader (socketConn),
// which stops at each frame's end and waits between frames: frames must
// come out whole however they arrive, several in one segment, one byte per
// segment, or larger than a read.
func TestFramesHoweverTheyArrive(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")
	const ping, pong = `{"event":"pusher:ping","data":{}}`, `{"event":"pusher:pong","data":"{}"}`

	var three []byte
	for range 3 {
		three = append(three, wsclient.TextFrame(ping)...)
	}
	_, err := c.Write(three)
	require.NoError(t, err)
	for range 3 {
		require.Equal(t, pong, c.read(t))
	}

	for _, b := range wsclient.TextFrame(ping) {
		_, err := c.Write([]byte{b})
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, pong, c.read(t))

	large := `{"event":"pusher:ping","data":{"pad":"` + strings.Repeat("x", 5000) + `"}}`
	_, err = c.Write(append(wsclient.TextFrame(large), wsclient.TextFrame(ping)...))
	require.NoError(t, err)
	require.Equal(t, pong, c.read(t))
	require.Equal(t, pong, c.read(t))
}

func TestRefusedConnections(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	for _, tc := range []struct {
		name, key, query string
		code             int
	}{
		{"unknown key", "nope", pusherJSQuery, 4001},
		{"disabled app", disabledKey, pusherJSQuery, 4003},
		{"no protocol", appKey, "?client=js", 4008},
		{"protocol too old", appKey, "?protocol=4", 4007},
		{"protocol too new", appKey, "?protocol=8", 4007},
		{"protocol not a number", appKey, "?protocol=seven", 4007},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, n.url(tc.key, tc.query))
			f := read(t, c)
			require.Equal(t, "pusher:error", f.Event)
			d := f.data(t)
			require.Equal(t, float64(tc.code), d["code"], f.raw)
			require.NotEmpty(t, d["message"])
			require.Equal(t, websocket.StatusCode(tc.code), closeStatus(t, c))
		})
	}
	for _, v := range []string{"5", "6", "7"} {
		c := dial(t, n.url(appKey, "?protocol="+v))
		require.Equal(t, "pusher:connection_established", read(t, c).Event, "protocol %s", v)
	}
	require.Equal(t, 4.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "bad_protocol"))
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "app_not_found"))
}

func TestOtherPathsAreNotFound(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	resp, err := http.Get("http://" + n.Addr() + "/apps/app-1/channels")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestSubscribeUnsubscribeCounted(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	a, _ := n.connect(t)
	b, _ := n.connect(t)

	subscribe(t, a, "my-channel")
	n.requireCounts(t, map[string]int64{"my-channel": 1})
	subscribe(t, b, "my-channel")
	subscribe(t, b, "other")
	n.requireCounts(t, map[string]int64{"my-channel": 2, "other": 1})

	send(t, a, `{"event":"pusher:unsubscribe","data":{"channel":"my-channel"}}`)
	// Unsubscribing a channel the socket is not in changes nothing and gets no reply.
	send(t, a, `{"event":"pusher:unsubscribe","data":{"channel":"never-subscribed"}}`)
	pingPong(t, a) // the next frame after the unsubscribes is the pong
	n.requireCounts(t, map[string]int64{"my-channel": 1, "other": 1})

	// Data as a JSON string (non-JS clients) works the same.
	send(t, b, `{"event":"pusher:unsubscribe","data":"{\"channel\":\"other\"}"}`)
	n.requireCounts(t, map[string]int64{"my-channel": 1})
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_subscriptions"))
	require.Equal(t, 2.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
}

func TestDoubleSubscribeCountsOnce(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	subscribe(t, c, "my-channel")
	// Answered as Pusher does, the subscription left as it is.
	send(t, c, `{"event":"pusher:subscribe","data":{"auth":"","channel":"my-channel"}}`)
	f := read(t, c)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Equal(t, map[string]any{"code": nil, "message": "Existing subscription to channel my-channel"}, f.data(t))
	// A later change is flushed no earlier than the ones before it, so once
	// "barrier" shows, a double count of my-channel would show too.
	subscribe(t, c, "barrier")
	n.requireCounts(t, map[string]int64{"my-channel": 1, "barrier": 1})

	send(t, c, `{"event":"pusher:unsubscribe","data":{"channel":"my-channel"}}`)
	n.requireCounts(t, map[string]int64{"barrier": 1})
}

func TestDisconnectUncountsEveryChannel(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	polite, _ := n.connect(t)
	abrupt, _ := n.connect(t)
	stays, _ := n.connect(t)
	for _, ch := range []string{"a", "b", "c"} {
		subscribe(t, polite, ch)
		subscribe(t, abrupt, ch)
	}
	subscribe(t, stays, "a")
	n.requireCounts(t, map[string]int64{"a": 3, "b": 2, "c": 2})

	require.NoError(t, polite.Close(websocket.StatusNormalClosure, "bye"))
	n.requireCounts(t, map[string]int64{"a": 2, "b": 1, "c": 1})
	require.NoError(t, abrupt.CloseNow()) // TCP close, no close frame
	n.requireCounts(t, map[string]int64{"a": 1})
}

func TestPingPong(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	pingPong(t, c)
	// pusher-js sends data as {}; others send "{}" or nothing.
	for _, ping := range []string{`{"event":"pusher:ping","data":"{}"}`, `{"event":"pusher:ping"}`} {
		send(t, c, ping)
		require.Equal(t, `{"event":"pusher:pong","data":"{}"}`, read(t, c).raw)
	}
	// WebSocket-level pings are answered too.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	go func() { _, _, _ = c.Read(ctx) }() // Ping needs a reader for the pong
	require.NoError(t, c.Ping(ctx))
}

func TestBadFramesKeepTheSocketOpen(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	for _, tc := range []struct{ name, in, msg string }{
		{"not json", `{"event":`, "Malformed frame"},
		{"not an object", `[1]`, "Malformed frame"},
		{"no event", `{"data":{}}`, "Malformed frame"},
		{"subscribe without channel", `{"event":"pusher:subscribe","data":{"auth":""}}`, "channel"},
		{"subscribe without data", `{"event":"pusher:subscribe"}`, "no data"},
		{"invalid channel name", `{"event":"pusher:subscribe","data":{"channel":"bad channel!"}}`, "Invalid channel name"},
		{"channel name too long", `{"event":"pusher:subscribe","data":{"channel":"` + strings.Repeat("x", 201) + `"}}`, "Invalid channel name"},
		{"reserved #", `{"event":"pusher:subscribe","data":{"channel":"#nope"}}`, "Invalid channel name"},
		{"client event on a public channel", `{"event":"client-typing","channel":"my-channel","data":{}}`, "only allowed on private and presence"},
		{"client event, not subscribed", `{"event":"client-typing","channel":"private-x","data":{}}`, "not subscribed"},
		{"client event on an encrypted channel", `{"event":"client-typing","channel":"private-encrypted-x","data":{}}`, "encrypted"},
		{"signin without user_data", `{"event":"pusher:signin","data":{"auth":"k:s"}}`, "user_data"},
		{"unknown event", `{"event":"what-is-this"}`, "Unsupported event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(t, c, tc.in)
			f := read(t, c)
			require.Equal(t, "pusher:error", f.Event, f.raw)
			d := f.data(t)
			require.Nil(t, d["code"], "code is null: the connection is fine")
			require.Contains(t, d["message"], tc.msg)
			pingPong(t, c)
		})
	}
	require.NoError(t, c.Write(context.Background(), websocket.MessageBinary, []byte{1, 2, 3}))
	require.Equal(t, "pusher:error", read(t, c).Event)
	pingPong(t, c)
	n.requireCounts(t, map[string]int64{})
}

func TestBadAuthIsASubscriptionError(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, id := n.connect(t)
	for _, tc := range []struct{ channel, auth, data, msg string }{
		{"private-x", "", "", "Invalid auth value"},
		{"private-x", sign("9.9:private-x"), "", "Invalid signature"},
		{"private-x", "other-key:" + auth.Sign(secret, id+":private-x"), "", "Invalid key"},
		{"private-encrypted-x", sign(id + ":private-x"), "", "Invalid signature"},
		// presence signs channel_data too
		{"presence-x", sign(id + ":presence-x"), `{"user_id":"1"}`, "Invalid signature"},
		// without channel_data the member comes from a signin, and there was none
		{"presence-x", sign(id + ":presence-x"), "", "pusher:signin"},
		{"#server-to-user-7", "", "", "signed in"},
	} {
		send(t, c, subscribeFrame(tc.channel, tc.auth, tc.data))
		f := read(t, c)
		require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
		require.Equal(t, tc.channel, f.Channel)
		d := f.data(t)
		require.Equal(t, "AuthError", d["type"], f.raw)
		require.Equal(t, 401.0, d["status"])
		require.Contains(t, d["error"], tc.msg)
	}
	// Still open, and only the good subscriptions count.
	subscribe(t, c, "public")
	subscribePrivate(t, c, id, "private-x")
	subscribePrivate(t, c, id, "private-encrypted-x")
	n.requireCounts(t, map[string]int64{"public": 1, "private-x": 1, "private-encrypted-x": 1})
	require.Equal(t, 7.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "auth"))
}

func TestOversizeFrameClosesWith1009(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	subscribe(t, c, "my-channel")
	n.requireCounts(t, map[string]int64{"my-channel": 1})
	big := `{"event":"pusher:ping","data":{"pad":"` + strings.Repeat("x", 20<<10) + `"}}`
	_ = c.Write(context.Background(), websocket.MessageText, []byte(big)) // may fail once the server closes
	require.Equal(t, websocket.StatusMessageTooBig, closeStatus(t, c))
	n.requireCounts(t, map[string]int64{})
}

// TestInvalidUTF8ClosesWith1007: a text message that is not UTF-8 closes
// its socket with 1007 (RFC 6455 §8.1), sent whole or split over
// fragments, and reaches nobody (a browser receiving it would close its
// own connection); a character split over two fragments is fine.
func TestInvalidUTF8ClosesWith1007(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	const ch = "private-chat"
	peer, pid := n.connect(t)
	subscribePrivate(t, peer, pid, ch)

	// fragments sends one text message as one frame per part.
	fragments := func(c *websocket.Conn, parts ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		w, err := c.Writer(ctx, websocket.MessageText)
		require.NoError(t, err)
		for _, p := range parts {
			_, _ = w.Write([]byte(p)) // may fail once the server closes
		}
		_ = w.Close()
	}
	const euro = "\xe2\x82\xac"
	for i, tc := range []struct {
		name  string
		parts []string
	}{
		{"whole", []string{clientEvent(ch, "client-x", "\"\xff\"")}},
		{"split, bad continuation", []string{`{"event":"client-x","channel":"` + ch + `","data":"` + euro[:2], `A"}`}},
		{"split, ends mid-character", []string{`{"event":"client-x","channel":"` + ch + `","data":"`, `"}` + euro[:1]}},
	} {
		c, id := n.connect(t)
		subscribePrivate(t, c, id, ch)
		// A character split over fragments is one character.
		fragments(c, `{"event":"client-ok","channel":"`+ch+`","data":"`+euro[:1], euro[1:]+`"}`)
		f := read(t, peer)
		require.Equal(t, "client-ok", f.Event, f.raw)
		require.Equal(t, "€", *f.Data)

		fragments(c, tc.parts...)
		require.Equal(t, websocket.StatusInvalidFramePayloadData, closeStatus(t, c), tc.name)
		require.Equal(t, float64(i+1), metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "invalid_utf8"), tc.name)
		n.requireCounts(t, map[string]int64{ch: 1})
	}
	// The peer got nothing more, and is still served.
	pingPong(t, peer)
}

func TestIdleSocketsAreClosed(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.SetIdleTimeout(300*time.Millisecond, 50*time.Millisecond)
	n.run(t)
	idle, _ := n.connect(t)
	subscribe(t, idle, "my-channel")
	n.requireCounts(t, map[string]int64{"my-channel": 1})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, _, err := idle.Read(ctx) // nothing sent: the sweeper closes it
	require.NoError(t, ctx.Err(), "idle socket was not closed")
	require.Equal(t, websocket.StatusCode(4201), websocket.CloseStatus(err), "close code of %v", err)
	n.requireCounts(t, map[string]int64{})
}

func TestDrain(t *testing.T) {
	t.Parallel()
	n := startNode(t, func(c *config.WSNode) { c.Drain = time.Second }).run(t)
	const sockets = 8
	conns := make([]*websocket.Conn, sockets)
	for i := range conns {
		conns[i], _ = n.connect(t)
		subscribe(t, conns[i], "my-channel")
	}
	n.requireCounts(t, map[string]int64{"my-channel": sockets})

	n.cancel()
	require.Eventually(t, func() bool { return n.readyz(t) == http.StatusServiceUnavailable }, wait, tick,
		"/readyz must report 503 while draining")
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_ready"), "headcount_wsnode_ready says what /readyz says")
	var wg sync.WaitGroup
	codes := make([]websocket.StatusCode, sockets)
	for i, c := range conns {
		wg.Go(func() { codes[i] = closeStatus(t, c) })
	}
	wg.Wait()
	for _, code := range codes {
		require.Equal(t, websocket.StatusCode(4200), code)
	}
	n.waitRun(t)
	// The node removed its contribution itself: no cleaner involved.
	n.requireCounts(t, map[string]int64{})
	contrib, _, err := n.store.Contributions(context.Background(), appID)
	require.NoError(t, err)
	require.Empty(t, contrib)
	// The listener is closed.
	_, _, err = websocket.Dial(context.Background(), n.url(appKey, pusherJSQuery), nil)
	require.Error(t, err)
}

func TestStopIsIdempotent(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	n.Stop()
	n.Stop()
	require.Equal(t, websocket.StatusCode(4200), closeStatus(t, c))
	n.waitRun(t)
}

// TestReadinessFollowsRedis: /readyz fails while counts cannot reach Redis,
// and a Redis that lost its data gets this node's counts back.
func TestReadinessFollowsRedis(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	subscribe(t, c, "my-channel")
	n.requireCounts(t, map[string]int64{"my-channel": 1})

	require.Equal(t, http.StatusOK, n.up(t), "the public port's /up says what /readyz says")
	// headcount_wsnode_ready says it too, for alerts.
	ready := func() float64 { return metricstest.Value(t, n.reg, "headcount_wsnode_ready") }
	require.Equal(t, 1.0, ready())
	n.redis.KillAndHold(t)
	require.Eventually(t, func() bool { return n.readyz(t) == http.StatusServiceUnavailable }, wait, tick)
	require.Eventually(t, func() bool { return n.up(t) == http.StatusServiceUnavailable }, wait, tick)
	require.Eventually(t, func() bool { return ready() == 0 }, wait, tick)
	pingPong(t, c) // sockets are served meanwhile

	n.redis.Restart(t) // empty: the node's contribution is gone
	require.Eventually(t, func() bool { return n.readyz(t) == http.StatusOK }, wait, tick)
	require.Eventually(t, func() bool { return ready() == 1 }, wait, tick)
	require.Eventually(t, func() bool { return n.up(t) == http.StatusOK }, wait, tick)
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "handshake_refused"),
		"a load balancer's check is not a refused handshake")
	n.requireCounts(t, map[string]int64{"my-channel": 1})
	// Stop now: the restarted server is stopped before the node's cleanup.
	n.cancel()
	n.waitRun(t)
	n.requireCounts(t, map[string]int64{})
}

func TestDrainSpreadsClosesOverTheWindow(t *testing.T) {
	t.Parallel()
	n := startNode(t, func(c *config.WSNode) { c.Drain = 600 * time.Millisecond }).run(t)
	const sockets = 6
	conns := make([]*websocket.Conn, sockets)
	for i := range conns {
		conns[i], _ = n.connect(t)
	}
	start := time.Now()
	n.cancel()
	var mu sync.Mutex
	var first, last time.Duration = time.Hour, 0
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			require.Equal(t, websocket.StatusCode(4200), closeStatus(t, c))
			d := time.Since(start)
			mu.Lock()
			first, last = min(first, d), max(last, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	// Closes are spaced window/n apart: the last comes at least 4 gaps after the first.
	require.GreaterOrEqual(t, last-first, 4*600*time.Millisecond/sockets, "closes were not spread: first %v last %v", first, last)
}

// TestOneGoroutinePerSocket guards the lean socket path: an idle,
// subscribed socket costs the server exactly one goroutine, its own. The
// clients are bare net.Conns, which start no goroutines of their own.
func TestOneGoroutinePerSocket(t *testing.T) {
	n := startNode(t).run(t)
	const sockets = 200
	base := runtime.NumGoroutine()
	for i := range sockets {
		r := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
		require.Contains(t, r.read(t), "pusher:connection_established")
		ch := "room-" + string(rune('a'+i%26))
		r.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)
		require.Contains(t, r.read(t), "subscription_succeeded")
	}
	// Transient goroutines (HTTP server internals, redis flushes) settle.
	require.Eventually(t, func() bool {
		return runtime.NumGoroutine()-base <= sockets+sockets/20
	}, wait, tick, "%d goroutines for %d idle sockets", runtime.NumGoroutine()-base, sockets)
	require.Equal(t, float64(sockets), metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
}

func TestNewFailsOnTakenAddress(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	_, err := wsnode.New(wsnode.Options{Config: withAddr(n.cfg, n.Addr())})
	require.ErrorContains(t, err, "--addr")
	// A failure on the admin listener releases the WebSocket one.
	// Below the ephemeral range, so no parallel test's connection takes it.
	addr := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	cfg := withAddr(n.cfg, addr)
	cfg.AdminAddr = n.AdminAddr()
	_, err = wsnode.New(wsnode.Options{Config: cfg})
	require.ErrorContains(t, err, "--admin-addr")
	again, err := net.Listen("tcp", addr)
	require.NoError(t, err, "New leaked the --addr listener")
	require.NoError(t, again.Close())
}

func withAddr(c config.WSNode, addr string) config.WSNode {
	c.Addr = addr
	return c
}

func TestMetricsAreServed(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connect(t)
	subscribe(t, c, "my-channel")
	pingPong(t, c)
	resp, err := http.Get("http://" + n.AdminAddr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, want := range []string{
		"headcount_wsnode_connections_open 1",
		"headcount_wsnode_connections_total 1",
		"headcount_wsnode_subscriptions 1",
		`headcount_wsnode_frames_received_total{type="ping"} 1`,
		`headcount_wsnode_frames_received_total{type="subscribe"} 1`,
		`headcount_wsnode_errors_total{reason="malformed_frame"} 0`,
		"headcount_counts_changes_total 2", // the connection and the subscription
	} {
		require.Contains(t, string(body), want)
	}
}
