package wsnode_test

import (
	"io"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/fanout"
)

// TestADeliveryAllocatesPerEventNotPerSubscriber: an event to a channel's
// subscribers costs the node a few allocations (the message's frame and
// the batch its subscribers share), not one or more per subscriber, so a
// burst to thousands of sockets leaves the collector nothing to chase
// while the writers run. Counted over the whole path, queueing and
// writing, while the clients read every frame, on the event loop: the
// goroutine transport's writes allocate per frame in coder/websocket.
func TestADeliveryAllocatesPerEventNotPerSubscriber(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loop transport needs Linux")
	}
	const subscribers = 200
	n := startNode(t, func(c *config.WSNode) { c.Transport = config.TransportEventLoop }).run(t)
	conns := make([]*rawConn, subscribers)
	for i := range conns {
		conns[i] = dialSubscribed(t, n.Addr(), "fan")
	}
	event := fanout.Message{Channel: "fan", Event: "e", Data: `{"n":1}`}
	n.Deliver(appID, event) // warms the writers' and the sockets' buffers
	var frameLen int
	for _, c := range conns {
		p := c.read(t)
		require.Contains(t, p, `"event":"e"`)
		frameLen = 2 + len(p) // an unmasked frame's header, payload under 126 bytes
		// Nothing more is buffered ahead: the frames that follow are read
		// from the socket itself, into buf, which allocates nothing.
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
	}
	buf := make([]byte, frameLen)
	allocs := testing.AllocsPerRun(20, func() {
		n.Deliver(appID, event)
		for _, c := range conns {
			if _, err := io.ReadFull(c.Conn.Conn, buf); err != nil {
				t.Fatal(err)
			}
		}
	})
	t.Logf("%.1f allocations per event to %d subscribers", allocs, subscribers)
	require.Less(t, allocs, float64(subscribers)/4, "allocations per event to "+strconv.Itoa(subscribers)+" subscribers")
}
