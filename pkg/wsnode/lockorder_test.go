//go:build lockorder

package wsnode_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
)

// TestLockOrder drives, on both transports at once, every path of the
// node that takes a lock while holding another (locks.go): a subscribe
// burst, client events, presence members joining and leaving, deliveries
// to many sockets while some close, unsubscribe or stop reading (cut as
// slow consumers), watchlist edges, terminate_connections, and the drain.
// Built with -tags lockorder (make test), every wsnode and evloop.Conn
// mutex checks the order as it is taken, so an inversion on any of these
// paths panics the test binary, naming both locks.
func TestLockOrder(t *testing.T) {
	require.True(t, lockorder.Enabled, "built without -tags lockorder: nothing is checked")
	for _, tr := range []string{config.TransportEventLoop, config.TransportGoroutine} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			driveLockPaths(t, startNode(t, func(c *config.WSNode) { c.Transport = tr }).run(t))
		})
	}
}

// lockPathSockets is how many sockets subscribe; a quarter each close,
// unsubscribe, or stay to the drain while the rest send client events.
const lockPathSockets = 16

func driveLockPaths(t *testing.T, n *testNode) {
	var readers sync.WaitGroup
	// drain reads c until it ends, so that deliveries keep flowing.
	drain := func(c *websocket.Conn) {
		readers.Go(func() {
			for {
				if _, _, err := c.Read(context.Background()); err != nil {
					return
				}
			}
		})
	}

	// Watchers of u0 (watchEdge: chanShard.mu, then watchlist.mu, then
	// socket.mu) and sockets signed in as t (terminate: chanShard.mu,
	// then loopLink.mu).
	for i := range 2 {
		c, id := n.connect(t)
		require.Equal(t, "pusher:signin_success", signinAs(t, c, id, "w"+strconv.Itoa(i), []string{"u0"}).Event)
		drain(c)
		c, id = n.connect(t)
		require.Equal(t, "pusher:signin_success", signinAs(t, c, id, "t", nil).Event)
		drain(c)
	}

	// A subscribe burst: three subscribes sent at once, then their answers.
	socks := make([]*websocket.Conn, lockPathSockets)
	for i := range socks {
		c, id := n.connect(t)
		user := `{"user_id":"u` + strconv.Itoa(i) + `","user_info":{}}`
		send(t, c, `{"event":"pusher:subscribe","data":{"auth":"","channel":"lo-pub"}}`)
		send(t, c, subscribeFrame("private-lo", sign(id+":private-lo"), ""))
		send(t, c, subscribeFrame("presence-lo", sign(id+":presence-lo:"+user), user))
		for ok := 0; ok < 3; {
			if f := read(t, c); f.Event == "pusher_internal:subscription_succeeded" {
				ok++
			}
		}
		socks[i] = c
		drain(c)
	}
	// A socket that never reads, with a small receive buffer: deliveries
	// past its send queue cut it under chanShard.mu (slowConsumer, then
	// its link's close).
	slow := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, slow.read(t), "pusher:connection_established")
	slow.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"lo-slow"}}`)
	require.Contains(t, slow.read(t), "pusher_internal:subscription_succeeded")

	// Through the bus, whose one goroutine delivers (as in production).
	pub := func(ch, event, data string) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		assert.NoError(t, n.Publish(ctx, appID, fanout.Message{Channel: ch, Event: event, Data: data}))
	}
	var work sync.WaitGroup
	work.Go(func() {
		for i := range 200 {
			pub("lo-pub", "e", `{"i":`+strconv.Itoa(i)+`}`)
			if i%20 == 0 {
				edge := protocol.WatchlistOnline
				if i%40 == 0 {
					edge = protocol.WatchlistOffline
				}
				pub(protocol.WatchUserChannel("u0"), edge, "")
			}
		}
		pub(protocol.TerminateUserChannel("t"), "terminate_connections", "")
	})
	for i, c := range socks {
		work.Go(func() {
			ctx := context.Background()
			switch i % 4 {
			case 0: // closes during the deliveries
				_ = c.CloseNow()
			case 1: // a member leaves, as does a private subscriber
				_ = c.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:unsubscribe","data":{"channel":"presence-lo"}}`))
				_ = c.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:unsubscribe","data":{"channel":"private-lo"}}`))
			default: // client events to the other private subscribers
				for range 20 {
					if c.Write(ctx, websocket.MessageText, []byte(`{"event":"client-x","channel":"private-lo","data":{}}`)) != nil {
						return
					}
				}
			}
		})
	}
	// Meanwhile, the slow socket's channel until it is cut (bounded).
	pad := `{"pad":"` + strings.Repeat("x", 4<<10) + `"}`
	for i := 0; i < 2000 && metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total") == 0; i++ {
		pub("lo-slow", "e", pad)
	}
	work.Wait()

	// The drain closes the sockets left, the slow one among them if it
	// was not cut yet.
	n.Stop()
	n.waitRun(t)
	readers.Wait()
	require.Equal(t, 2.0, metricstest.Value(t, n.reg, "headcount_wsnode_terminated_total"))
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"))
}
