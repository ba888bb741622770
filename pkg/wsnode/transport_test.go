package wsnode_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/wsclient"
)

// These tests hold whichever transport serves the sockets
// (HC_TEST_TRANSPORT; the default is the event loop): what a socket's
// handler waits on holds up nothing but that socket, and a close
// handshake ends without the client.

// pauseRedis makes the node's Redis answer nothing for d: every handler
// that reads or writes Redis waits meanwhile.
func pauseRedis(t *testing.T, n *testNode, d time.Duration) {
	t.Helper()
	require.NoError(t, n.redis.Client(t).Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err())
}

// TestAWaitingHandlerHoldsUpNoOtherSocket: a socket whose handler waits on
// Redis (a cache channel's subscribe reads the cached event) gets its next
// frames answered only after it, in order, while another socket's ping is
// answered meanwhile: no socket waits for another's handler.
func TestAWaitingHandlerHoldsUpNoOtherSocket(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	n := startNode(t).run(t)
	a := dialRaw(t, n.Addr(), "/app/"+cacheKey+pusherJSQuery)
	b := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, a.read(t), "pusher:connection_established")
	require.Contains(t, b.read(t), "pusher:connection_established")

	const pause = 2 * time.Second
	paused := time.Now()
	pauseRedis(t, n, pause)
	a.send(t, `{"event":"pusher:subscribe","data":{"channel":"cache-waits"}}`)
	a.send(t, `{"event":"pusher:ping","data":{}}`)
	b.send(t, `{"event":"pusher:ping","data":{}}`)
	require.Contains(t, b.read(t), "pusher:pong")
	require.Less(t, time.Since(paused), pause, "another socket's ping waited for the paused handler")

	require.Contains(t, a.read(t), "pusher_internal:subscription_succeeded")
	require.Contains(t, a.read(t), "pusher:cache_miss")
	require.Contains(t, a.read(t), "pusher:pong", "the ping is answered after the subscribe it followed")
}

// TestAFloodBehindAWaitingHandlerIsReadInOrder: a client that sends far
// more than a socket's handler keeps up with (here while it waits on
// Redis) has every frame answered, in order: the node stops reading the
// socket rather than buffering without bound, and goes on once the
// handler caught up.
func TestAFloodBehindAWaitingHandlerIsReadInOrder(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.LiftFrameBudget()
	n.run(t)
	c := dialRaw(t, n.Addr(), "/app/"+cacheKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")

	const pings = 12000 // 12,000 x 35 bytes: more than a loop holds for one socket (inboxLimit)
	flood := wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"channel":"cache-flood"}}`)
	for range pings {
		flood = append(flood, wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)...)
	}
	pauseRedis(t, n, time.Second)
	written := make(chan error, 1)
	go func() { _, err := c.Write(flood); written <- err }()
	require.Contains(t, c.read(t), "pusher_internal:subscription_succeeded")
	require.Contains(t, c.read(t), "pusher:cache_miss")
	for i := range pings {
		require.Contains(t, c.read(t), "pusher:pong", "reply %d", i)
	}
	require.NoError(t, <-written)
}

// TestCloseHandshakeEndsWithoutTheClient: a socket the node closes (here
// idle) whose client reads the close frame and never answers it is ended
// by the node after the close timeout, not held open.
func TestCloseHandshakeEndsWithoutTheClient(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.SetIdleTimeout(200*time.Millisecond, 50*time.Millisecond)
	n.SetCloseTimeout(300 * time.Millisecond)
	n.run(t)
	c := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")
	closeFrame := c.read(t)
	require.GreaterOrEqual(t, len(closeFrame), 2)
	require.EqualValues(t, 4201, binary.BigEndian.Uint16([]byte(closeFrame)), "close code")
	require.True(t, strings.Contains(closeFrame, "activity timeout"), closeFrame)
	// No answer: the node ends the connection itself (coder/websocket
	// after its own 5 s, the event loop after the close timeout).
	_, err := c.Read(wait)
	require.ErrorIs(t, err, io.EOF)
}

// TestClientGoneDuringItsUpgrade: a client that resets its connection while
// the node is still admitting it (here reading the app's connection count
// while Redis is paused) leaves nothing behind: the socket the node opened
// for it is closed and uncounted once the admission is done.
func TestClientGoneDuringItsUpgrade(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	pauseRedis(t, n, time.Second)
	c, err := net.Dial("tcp", n.Addr())
	require.NoError(t, err)
	_, err = io.WriteString(c, "GET /app/"+limitKey+pusherJSQuery+" HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_port_connections"))
	}, wait, tick)
	require.NoError(t, c.(*net.TCPConn).SetLinger(0))
	require.NoError(t, c.Close()) // a reset, while the node waits on Redis
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_total"), "admitted once Redis answers")
		assert.Equal(c, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
		assert.Equal(c, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_port_connections"))
	}, wait, tick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := n.store.Connections(context.Background(), limitAppID)
		assert.NoError(c, err)
		assert.Zero(c, got, "the app's connections in Redis")
	}, wait, tick)
}

// warmSocket returns a node and a socket subscribed to one channel, so the
// node's bus connection is up before a test pauses Redis.
func warmSocket(t *testing.T) (*testNode, *rawConn) {
	t.Helper()
	n := startNode(t).run(t)
	c := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")
	c.send(t, `{"event":"pusher:subscribe","data":{"channel":"warm"}}`)
	require.Contains(t, c.read(t), "subscription_succeeded")
	return n, c
}

// TestABurstOfSubscribesWaitsForTheBusOnce: pusher-js sends every
// subscribe of a page in one burst. Their channels, new to the node, are
// all recorded and joined before the first answer waits for the bus, and
// the answers come in order once the bus has them all: one wait for the
// burst. Before, each answer waited for its own channel before the next
// subscribe was read, a Redis round trip per channel in a row; with Redis
// paused, one subscription of the burst was recorded until it came back.
func TestABurstOfSubscribesWaitsForTheBusOnce(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	if os.Getenv("HC_TEST_TRANSPORT") == "goroutine" {
		t.Skip("the goroutine transport cannot see the next frame: it answers subscribes one at a time")
	}
	const pause, burst = 600 * time.Millisecond, 10
	n, c := warmSocket(t)

	pauseRedis(t, n, pause)
	start := time.Now()
	var frames []byte
	for i := range burst {
		frames = append(frames, wsclient.TextFrame(fmt.Sprintf(`{"event":"pusher:subscribe","data":{"channel":"fresh-%d"}}`, i))...)
	}
	frames = append(frames, wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)...)
	_, err := c.Write(frames)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return metricstest.Value(t, n.reg, "headcount_wsnode_subscriptions") == burst+1
	}, wait, tick)
	require.Less(t, time.Since(start), pause/2, "the burst's subscriptions were recorded one wait for the bus at a time")

	for i := range burst {
		f := parseRaw(t, c.read(t))
		require.Equal(t, "pusher_internal:subscription_succeeded", f.Event)
		require.Equal(t, fmt.Sprintf("fresh-%d", i), f.Channel, "answers out of order")
	}
	require.GreaterOrEqual(t, time.Since(start), pause*3/4, "answered before Redis confirmed the node's subscriptions")
	require.Contains(t, c.read(t), "pusher:pong", "the ping behind the burst is answered after it")
	for i := range burst {
		require.NoError(t, n.Publish(context.Background(), appID, fanout.Message{Channel: fmt.Sprintf("fresh-%d", i), Event: "right-after", Data: "{}"}))
		require.Contains(t, c.read(t), "right-after")
	}
}

// TestAMixedBurstIsAnsweredInOrder: subscribes whose answers are held for
// one wait for the bus (heldAnswers) are answered in the order of the
// frames, whatever is between them: a repeated subscribe, a frame that
// is not JSON, a refused signature, a presence subscribe, a ping that
// looks like a subscribe to the inbox's peek, an unsubscribe. Redis is paused, so the held answers wait while the
// frames behind them are read.
func TestAMixedBurstIsAnsweredInOrder(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	hello := parseRaw(t, c.read(t))
	require.Equal(t, "pusher:connection_established", hello.Event)
	var conn struct {
		SocketID string `json:"socket_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(hello.Data), &conn))
	c.send(t, `{"event":"pusher:subscribe","data":{"channel":"warm"}}`) // the bus's connection is up
	require.Contains(t, c.read(t), "subscription_succeeded")

	cd := `{"user_id":"u1"}`
	sends := []string{
		`{"event":"pusher:subscribe","data":{"channel":"mixed-1"}}`,
		`{"event":"pusher:subscribe","data":{"channel":"mixed-1"}}`,
		`not json`,
		`{"event":"pusher:subscribe","data":{"channel":"mixed-2"}}`,
		subscribeFrame("private-mixed", appKey+":bad", ""),
		`{"event":"pusher:subscribe","data":{"channel":"mixed-3"}}`,
		subscribeFrame("presence-mixed", signKey(appKey, conn.SocketID+":presence-mixed:"+cd), cd),
		`{"event":"pusher:subscribe","data":{"channel":"mixed-4"}}`,
		`{"event":"pusher:ping","data":{"pusher:subscribe":"a ping that looks like a subscribe"}}`,
		`{"event":"pusher:subscribe","data":{"channel":"mixed-5"}}`,
		`{"event":"pusher:unsubscribe","data":{"channel":"mixed-5"}}`,
		`{"event":"pusher:subscribe","data":{"channel":"mixed-6"}}`,
	}
	want := []string{
		"pusher_internal:subscription_succeeded mixed-1",
		"pusher:error ",
		"pusher:error ",
		"pusher_internal:subscription_succeeded mixed-2",
		"pusher:subscription_error private-mixed",
		"pusher_internal:subscription_succeeded mixed-3",
		"pusher_internal:subscription_succeeded presence-mixed",
		"pusher_internal:subscription_succeeded mixed-4",
		"pusher:pong ",
		"pusher_internal:subscription_succeeded mixed-5",
		"pusher_internal:subscription_succeeded mixed-6",
	}
	var frames []byte
	for _, m := range sends {
		frames = append(frames, wsclient.TextFrame(m)...)
	}
	pauseRedis(t, n, 300*time.Millisecond)
	_, err := c.Write(frames)
	require.NoError(t, err)
	var got []string
	for len(got) < len(want) {
		f := parseRaw(t, c.read(t))
		if f.Event == "pusher_internal:member_added" || f.Event == "pusher_internal:subscription_count" {
			continue
		}
		got = append(got, f.Event+" "+f.Channel)
	}
	require.Equal(t, want, got)
}

// TestSubscribeIsAnsweredOnceTheBusHasTheChannel: the answer to a
// subscribe waits until Redis has confirmed the node's subscription to the
// channel, so an event published as soon as the client has its
// subscription_succeeded reaches it. Redis is paused as the client
// subscribes to a channel new to the node: the answer comes only after the
// pause, and the event published then arrives. Before, the answer came
// at once and a client event sent right after it could pass the node's
// own SUBSCRIBE and be lost.
func TestSubscribeIsAnsweredOnceTheBusHasTheChannel(t *testing.T) {
	t.Parallel()
	const pause = 400 * time.Millisecond
	n, c := warmSocket(t)

	pauseRedis(t, n, pause)
	start := time.Now()
	c.send(t, `{"event":"pusher:subscribe","data":{"channel":"fresh"}}`)
	require.Contains(t, c.read(t), "subscription_succeeded")
	require.GreaterOrEqual(t, time.Since(start), pause*3/4, "answered before Redis confirmed the node's subscription")
	require.NoError(t, n.Publish(context.Background(), appID, fanout.Message{Channel: "fresh", Event: "right-after", Data: "{}"}))
	require.Contains(t, c.read(t), "right-after")
}
