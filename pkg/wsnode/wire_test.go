package wsnode_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/fanout"
)

// dialLibrary dials the node with coder/websocket's client, which checks
// every frame it reads against RFC 6455, over d.
func dialLibrary(t *testing.T, d *net.Dialer, addr string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/"+appKey+pusherJSQuery, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}},
	})
	require.NoError(t, err)
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// fill delivers frames of 16 KiB on channel, whose one subscriber does not
// read, until the node waits for room in that socket's buffer (the kernel's
// send buffer grows to megabytes first); before is how many sockets were
// waiting already. It returns how many frames it delivered.
func fill(t *testing.T, n *testNode, channel string, before int) int {
	t.Helper()
	data := strings.Repeat("f", 16<<10)
	for i := 1; i <= 2000; i++ {
		sent := metricstest.Value(t, n.reg, "headcount_wsnode_frames_sent_total")
		n.Deliver(appID, fanout.Message{Channel: channel, Event: "fill", Data: data})
		waiting := false
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			waiting = n.WritesWaiting() > before
			assert.True(c, waiting || metricstest.Value(t, n.reg, "headcount_wsnode_frames_sent_total") > sent,
				"frame %d on %s neither written nor waiting for room", i, channel)
		}, wait, tick)
		if waiting {
			return i
		}
	}
	t.Fatalf("%s: 32 MiB written and the socket buffer never filled", channel)
	return 0
}

func readText(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	typ, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, websocket.MessageText, typ)
	return string(b)
}

// TestFramesOfEverySizeArriveWholePastAFullBuffer: deliveries whose
// payloads straddle each header size (7-bit, 16-bit and 64-bit lengths)
// reach a client whose socket buffer is full while they are written, whole
// and in order, and a ping the client sends meanwhile is answered with a
// pong that does not cut into a frame half written.
func TestFramesOfEverySizeArriveWholePastAFullBuffer(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c := dialLibrary(t, smallReceiveBuffer, n.Addr())
	require.Contains(t, readText(t, c), "pusher:connection_established")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"event":"pusher:subscribe","data":{"channel":"sizes"}}`)))
	require.Contains(t, readText(t, c), "pusher_internal:subscription_succeeded")

	fills := fill(t, n, "sizes", 0) // the client reads nothing yet
	// Payload sizes are the frame's: the event's JSON around the data.
	envelope := len(`{"event":"big","channel":"sizes","data":""}`)
	var want []string
	for _, size := range []int{64, 125, 126, 65535, 65536, 70000} {
		data := strings.Repeat(strconv.Itoa(size%10), size-envelope)
		want = append(want, data)
		n.Deliver(appID, fanout.Message{Channel: "sizes", Event: "big", Data: data})
	}

	got := make(chan string, fills+len(want))
	go func() {
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				close(got)
				return
			}
			got <- string(b)
		}
	}()
	require.NoError(t, c.Ping(ctx), "the pong never came back whole")
	for i := range fills {
		select {
		case msg := <-got:
			require.Contains(t, msg, `"event":"fill"`, "fill frame %d", i)
		case <-ctx.Done():
			t.Fatalf("fill frame %d never arrived", i)
		}
	}
	for i, data := range want {
		select {
		case msg := <-got:
			require.Equal(t, `{"event":"big","channel":"sizes","data":"`+data+`"}`, msg, "frame %d", i)
		case <-ctx.Done():
			t.Fatalf("frame %d never arrived", i)
		}
	}
	require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"))
}

// TestClientsThatStopReadingHoldUpNoWriter: more clients than the node has
// writers stop reading with their socket buffers full; a delivery to a
// client that reads still arrives at once, not after the write timeout.
func TestClientsThatStopReadingHoldUpNoWriter(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.SetWriteTimeout(time.Hour, 50*time.Millisecond) // only the test's end cuts them
	n.run(t)
	const stuck = 16 // above any writer pool this node ever had
	for i := range stuck {
		c := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+appKey+pusherJSQuery)
		require.Contains(t, c.read(t), "pusher:connection_established")
		c.send(t, `{"event":"pusher:subscribe","data":{"channel":"stuck-`+strconv.Itoa(i)+`"}}`)
		require.Contains(t, c.read(t), "subscription_succeeded")
	}
	reader := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, reader.read(t), "pusher:connection_established")
	reader.send(t, `{"event":"pusher:subscribe","data":{"channel":"free"}}`)
	require.Contains(t, reader.read(t), "subscription_succeeded")

	// Each stuck client in turn: its frames go out until its buffer is
	// full; the old pool of eight writers had none left for the ninth.
	for i := range stuck {
		fill(t, n, "stuck-"+strconv.Itoa(i), i)
	}
	require.Equal(t, stuck, n.WritesWaiting())

	n.Deliver(appID, fanout.Message{Channel: "free", Event: "small", Data: "still moving"})
	require.Contains(t, reader.read(t), "still moving")
	require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"))
}
