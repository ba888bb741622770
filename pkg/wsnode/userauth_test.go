package wsnode_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/config"
)

// TestUserAuthenticationRequired: for an app with enableUserAuthentication,
// a socket that neither signs in nor subscribes to a private or presence
// channel is closed with pusher:error 4009 and close code 4009 after the
// timeout; one that signed in, and one with a private subscription, stay.
func TestUserAuthenticationRequired(t *testing.T) {
	t.Parallel()
	const timeout, sweep = 300 * time.Millisecond, 20 * time.Millisecond
	n := startNode(t, func(c *config.WSNode) { c.UserAuthTimeout = timeout })
	n.SetIdleTimeout(time.Minute, sweep)
	n.run(t)

	// Both authorized sockets connect before the one that is not, so their
	// deadlines have passed when it is closed.
	signed, signedID := n.connectKey(t, authKey)
	userData := `{"id":"7"}`
	b, _ := json.Marshal(map[string]any{"event": "pusher:signin",
		"data": map[string]string{"auth": signKey(authKey, signedID+"::user::"+userData), "user_data": userData}})
	send(t, signed, string(b))
	require.Equal(t, "pusher:signin_success", read(t, signed).Event)
	private, privateID := n.connectKey(t, authKey)
	subscribePrivateKey(t, private, authKey, privateID, "private-x")

	began := time.Now()
	anon, _ := n.connectKey(t, authKey)
	subscribe(t, anon, "public-x") // a public channel does not authorize
	f := read(t, anon)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Equal(t, 4009.0, f.data(t)["code"], f.raw)
	require.Equal(t, websocket.StatusCode(4009), closeStatus(t, anon))
	// The sweeper's clock is as coarse as its period.
	require.GreaterOrEqual(t, time.Since(began), timeout-sweep, "closed before the timeout")
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "user_auth_timeout"))

	pingPong(t, signed)
	pingPong(t, private)
	// Other apps are untouched.
	other, _ := n.connect(t)
	pingPong(t, other)
}
