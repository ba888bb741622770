package wsnode_test

import (
	"encoding/json"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/protocol"
)

// TestTerminateUserConnections: an order on the user's terminate channel
// (what the HTTP API's terminate_connections publishes) closes every socket
// signed in as that user, on every node, with pusher:error 4009 and close
// code 4009; other users and presence-only members are untouched.
func TestTerminateUserConnections(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	signin := func(n *testNode, user string, times int) *websocket.Conn {
		c, id := n.connect(t)
		userData := `{"id":"` + user + `"}`
		msg, _ := json.Marshal(map[string]any{"event": "pusher:signin",
			"data": map[string]string{"auth": sign(id + "::user::" + userData), "user_data": userData}})
		for range times {
			send(t, c, string(msg))
			f := read(t, c)
			require.Equal(t, "pusher:signin_success", f.Event, f.raw)
		}
		return c
	}
	// onA signs in twice: it must watch the channel once (checked at the
	// end: no subscription is left behind).
	onA, onB, other := signin(a, "7", 2), signin(b, "7", 1), signin(a, "8", 1)
	again := signin(b, "7", 1) // a second socket of the user on b
	presenceOnly, pid := b.connect(t)
	subscribePresence(t, presenceOnly, pid, "presence-room", "7", `{}`)

	ch := protocol.TerminateUserChannel("7")
	a.waitSubscribed(t, appID, ch, 2)
	publish(t, a, appID, fanout.Message{Channel: ch, Event: "terminate_connections"})

	for _, c := range []*websocket.Conn{onA, onB, again} {
		f := read(t, c)
		require.Equal(t, "pusher:error", f.Event, f.raw)
		require.Equal(t, 4009.0, f.data(t)["code"], f.raw)
		require.Equal(t, websocket.StatusCode(protocol.CodeUnauthorized), closeStatus(t, c))
	}
	pingPong(t, other)
	pingPong(t, presenceOnly)
	require.Equal(t, 1.0, metricstest.Value(t, a.reg, "headcount_wsnode_terminated_total"))
	require.Equal(t, 2.0, metricstest.Value(t, b.reg, "headcount_wsnode_terminated_total"))
	// Closed sockets leave the channel: no node stays subscribed.
	a.waitSubscribed(t, appID, ch, 0)
	a.waitSubscribed(t, appID, protocol.TerminateUserChannel("8"), 1)
}
