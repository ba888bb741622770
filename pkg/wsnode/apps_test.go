package wsnode_test

import (
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
)

// TestReloadAppliesToOpenSockets: a reload of the apps reaches the sockets
// already open. A socket of an app whose client messages were turned on
// may send client events at once, on the same connection; a socket of an
// app left unchanged keeps its *App; one of an app removed is closed with
// 4001, after pusher:error 4001.
func TestReloadAppliesToOpenSockets(t *testing.T) {
	t.Parallel()
	list := func(clientMessages bool, withOther bool) *apps.Registry {
		l := []*apps.App{{ID: "app-r", Key: "key-r", Secret: secret, Enabled: true, EnableClientMessages: clientMessages}}
		if withOther {
			l = append(l, &apps.App{ID: "app-o", Key: "key-o", Secret: secret, Enabled: true})
		}
		reg, err := apps.New(l)
		require.NoError(t, err)
		return reg
	}
	reg := list(false, true)
	n := startNode(t, func(c *config.WSNode) { c.Apps = reg }).run(t)

	c, sid := n.connectKey(t, "key-r")
	subscribePrivateKey(t, c, "key-r", sid, "private-r")
	other, _ := n.connectKey(t, "key-o")
	send(t, c, clientEvent("private-r", "client-x", "1"))
	f := read(t, c)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Contains(t, f.raw, "enable client messages")

	reg.Replace(list(true, true))
	require.Eventually(t, func() bool {
		send(t, c, clientEvent("private-r", "client-x", "2"))
		send(t, c, `{"event":"pusher:ping","data":{}}`)
		refused := false
		for {
			f := read(t, c)
			if f.Event == "pusher:pong" {
				return !refused
			}
			refused = refused || f.Event == "pusher:error"
		}
	}, wait, 50*time.Millisecond, "client events allowed on the open socket")

	reg.Replace(list(true, false))
	require.Equal(t, websocket.StatusCode(4001), closeStatus(t, other), "the removed app's socket")
	send(t, c, `{"event":"pusher:ping","data":{}}`)
	require.Equal(t, "pusher:pong", read(t, c).Event, "the unchanged app's socket stays")
}
