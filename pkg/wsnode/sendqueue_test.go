package wsnode_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/wsclient"
)

// smallReceiveBuffer makes the server's writes to a client that does not
// read back up after a few KiB instead of a few MiB.
var smallReceiveBuffer = &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
	return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
}}

// TestOwnBurstIsNotASlowConsumer: a client sends its whole channel limit
// of subscribes in one burst before reading anything, as pusher-js does on
// connect. Its replies outgrow the send queue many times over; the node
// waits for the client to read them instead of cutting it.
func TestOwnBurstIsNotASlowConsumer(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+wideKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")

	const channels = wideChannels
	var burst bytes.Buffer
	want := map[string]int64{}
	for i := range channels {
		// Long names (200 is the limit) make the replies outgrow the
		// kernel's buffers, so the node's writer has to wait for the reader.
		ch := fmt.Sprintf("burst-%04d-%s", i, strings.Repeat("x", 189))
		burst.Write(wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"auth":"","channel":"` + ch + `"}}`))
		want[ch] = 1
	}
	// The whole burst is sent before anything is read (the node may stop
	// reading it once the replies back up, so from another goroutine).
	written := make(chan error, 1)
	go func() { _, err := c.Write(burst.Bytes()); written <- err }()
	select {
	case err := <-written:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("the burst was not read")
	}
	for i := range channels {
		require.Contains(t, c.read(t), "pusher_internal:subscription_succeeded", "reply %d", i)
	}
	requireAppCounts(t, n, wideAppID, want)
	require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"))
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
}

// TestRepliesNobodyReadsEndInTheWriteTimeout: a client that keeps sending
// pings and never reads a pong makes its handler wait for room; the write
// timeout then cuts it, so the wait is bounded and nothing leaks. (The
// frame budget is lifted: within it a client cannot make the node write
// this much with pongs, though it can with presence member lists.)
func TestRepliesNobodyReadsEndInTheWriteTimeout(t *testing.T) {
	// Not parallel: the node must cut the client within a deadline,
	// which tests beside it stretched past on two cores.
	n := startNode(t)
	n.SetWriteTimeout(300*time.Millisecond, 50*time.Millisecond)
	n.LiftFrameBudget()
	n.run(t)
	c := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")
	c.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"pings"}}`)
	n.requireCounts(t, map[string]int64{"pings": 1})

	ping := wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)
	pings := bytes.Repeat(ping, 1000)
	deadline := time.Now().Add(wait)
	var err error
	for time.Now().Before(deadline) {
		require.NoError(t, c.SetWriteDeadline(time.Now().Add(wait)))
		if _, err = c.Write(pings); err != nil {
			break
		}
	}
	require.Error(t, err, "the node never cut a client that does not read its pongs")
	require.False(t, errors.Is(err, net.ErrClosed))
	require.True(t, strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe"), "write error %v", err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
	}, wait, tick)
	n.requireCounts(t, map[string]int64{})
	require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"))
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "write_timeout"))
}

// TestDeliveryBurstOfOnePerChannelFits: a socket on the channel limit gets
// one delivery per channel at once (subscription_count after pusher-js
// re-sends its subscribes): a burst the size of the channel limit, queued
// before any writer runs, is not a slow consumer. On the default cap and on
// an app's higher one, whose channel names take the room a delivery per
// channel is given.
func TestDeliveryBurstOfOnePerChannelFits(t *testing.T) {
	n := startNode(t).run(t)
	for _, tc := range []struct {
		app, key, channel string
		burst             int
	}{
		{appID, appKey, "burst", apps.DefaultMaxChannelsPerConnection},
		{wideAppID, wideKey, "burst-" + strings.Repeat("x", 150), wideChannels},
	} {
		c := dialRaw(t, n.Addr(), "/app/"+tc.key+pusherJSQuery)
		require.Contains(t, c.read(t), "pusher:connection_established")
		c.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+tc.channel+`"}}`)
		require.Contains(t, c.read(t), "subscription_succeeded")
		func() {
			// On one P nothing else runs while the loop queues: no writer
			// takes the queue in between, as on a node whose cores are busy.
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			for i := range tc.burst {
				n.Deliver(tc.app, fanout.Message{Channel: tc.channel, Event: "pusher_internal:subscription_count",
					Data: `{"subscription_count":` + strconv.Itoa(i) + `}`})
			}
		}()
		for i := range tc.burst {
			require.Contains(t, c.read(t), `{\"subscription_count\":`+strconv.Itoa(i)+`}`, tc.app)
		}
		require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"), tc.app)
	}
}

// TestDeliveriesKeepTheirOrderAcrossWriters: with several writers, a
// socket whose queue refills while a writer is on it goes back to the
// ready list and may be taken by another writer; never by two at once, so
// every subscriber reads every event in the order it was delivered. On 2
// CPUs the default pool has one writer, so this is where the node's tests
// run the pool with more.
func TestDeliveriesKeepTheirOrderAcrossWriters(t *testing.T) {
	t.Parallel()
	const writers, sockets, events = 4, 40, 300
	n := startNode(t, func(c *config.WSNode) { c.Writers = writers })
	n.run(t)
	require.Equal(t, writers, n.Writers())
	clients := make([]*rawConn, sockets)
	for i := range clients {
		clients[i] = dialSubscribed(t, n.Addr(), "order")
	}
	for i := range events {
		n.Deliver(appID, fanout.Message{Channel: "order", Event: "seq", Data: "n" + strconv.Itoa(i) + "."})
	}
	for _, c := range clients {
		for i := range events {
			require.Contains(t, c.read(t), `"data":"n`+strconv.Itoa(i)+`."`)
		}
	}
	require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"))
}
