package wsnode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
)

// The apps of the limit tests, beside app-1 (all share secret).
const (
	slowKey   = "key-slow"   // 2 client events per second, names up to 10 bytes
	freeKey   = "key-free"   // client events unlimited, names up to 300 bytes
	originKey = "key-origin" // browsers from https://good.example or *.good.example only
)

func withLimitApps(t *testing.T) func(*config.WSNode) {
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: secret, Enabled: true, EnableClientMessages: true},
		{ID: "app-slow", Key: slowKey, Secret: secret, Enabled: true, EnableClientMessages: true, MaxClientEventsPerSecond: 2, MaxChannelNameLength: 10},
		{ID: "app-free", Key: freeKey, Secret: secret, Enabled: true, EnableClientMessages: true, MaxClientEventsPerSecond: -1, MaxChannelNameLength: 300},
		{ID: "app-origin", Key: originKey, Secret: secret, Enabled: true, AllowedOrigins: []string{"https://good.example", "*.good.example"}},
	})
	require.NoError(t, err)
	return func(c *config.WSNode) { c.Apps = reg }
}

// burst sends n client events on ch, then a ping, and returns how many
// were refused with 4301 before the pong.
func burst(t *testing.T, c *websocket.Conn, ch string, n int) int {
	t.Helper()
	for i := range n {
		send(t, c, clientEvent(ch, "client-burst", fmt.Sprint(i)))
	}
	send(t, c, `{"event":"pusher:ping","data":{}}`)
	limited := 0
	for {
		f := read(t, c)
		if f.Event == "pusher:pong" {
			return limited
		}
		require.Equal(t, "pusher:error", f.Event, f.raw)
		require.Equal(t, 4301.0, f.data(t)["code"], f.raw)
		limited++
	}
}

// TestClientEventRatePerApp: maxClientEventsPerSecond sets each socket's
// rate (2 here, where the default is 10), a negative one lifts it, and
// refusals are counted by app and kind.
func TestClientEventRatePerApp(t *testing.T) {
	t.Parallel()
	n := startNode(t, withLimitApps(t)).run(t)
	const ch = "private-c" // within app-slow's 10 bytes

	slow, sid := n.connectKey(t, slowKey)
	subscribePrivateKey(t, slow, slowKey, sid, ch)
	limited := burst(t, slow, ch, 20)
	require.GreaterOrEqual(t, limited, 20-2-2, "at most 2 per second (and a refill)")
	require.Equal(t, float64(limited), metricstest.Value(t, n.reg, "headcount_ratelimit_rejected_total", "app", "app-slow", "kind", "client_events"))

	// On another channel: slow's events, published through Redis, may
	// still be on their way back to this node.
	other, oid := n.connectKey(t, slowKey)
	subscribePrivateKey(t, other, slowKey, oid, "private-d")
	require.Less(t, burst(t, other, "private-d", 2), 2, "per socket: another socket has its own budget")

	free, fid := n.connectKey(t, freeKey)
	subscribePrivateKey(t, free, freeKey, fid, ch)
	require.Zero(t, burst(t, free, ch, 50))
}

// TestChannelNameLimitPerApp: an app's maxChannelNameLength bounds the
// names its sockets may subscribe to, below or above the default 200.
func TestChannelNameLimitPerApp(t *testing.T) {
	t.Parallel()
	n := startNode(t, withLimitApps(t)).run(t)
	slow, _ := n.connectKey(t, slowKey)
	send(t, slow, `{"event":"pusher:subscribe","data":{"channel":"abcdefghijk"}}`)
	f := read(t, slow)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Contains(t, f.data(t)["message"], "over the limit of 10")
	subscribe(t, slow, "abcdefghij")

	free, _ := n.connectKey(t, freeKey)
	subscribe(t, free, strings.Repeat("x", 250))
}

// TestOriginRefusedBeforeUpgrade: an upgrade from an origin the app does
// not allow is a 403 saying so, counted as origin_not_allowed, not as a
// handshake refusal; allowed origins, wildcard hosts, a missing Origin
// and apps without the list connect.
func TestOriginRefusedBeforeUpgrade(t *testing.T) {
	t.Parallel()
	n := startNode(t, withLimitApps(t)).run(t)
	dialOrigin := func(key, origin string) (*websocket.Conn, *http.Response, error) {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		c, resp, err := websocket.Dial(context.Background(), n.url(key, pusherJSQuery), &websocket.DialOptions{HTTPHeader: h})
		if c != nil {
			t.Cleanup(func() { _ = c.CloseNow() })
		}
		return c, resp, err
	}
	_, resp, err := dialOrigin(originKey, "https://evil.example")
	require.Error(t, err)
	require.NotNil(t, resp)
	defer resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(body), `Origin "https://evil.example" is not allowed for app app-origin`)
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "origin_not_allowed"))
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "handshake_refused"))

	// Refused as browsers never send them: a user before the host, which a
	// lax parser takes for the host, and a second Origin header.
	for _, h := range []http.Header{
		{"Origin": {"https://evil.example:443@chat.good.example"}},
		{"Origin": {"https://good.example", "https://evil.example"}},
	} {
		_, resp, err := websocket.Dial(context.Background(), n.url(originKey, pusherJSQuery), &websocket.DialOptions{HTTPHeader: h})
		require.Error(t, err, "%v", h)
		require.NotNil(t, resp, "%v", h)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", h)
	}

	for _, tc := range []struct{ key, origin string }{
		{originKey, "https://good.example"},
		{originKey, "http://chat.good.example:8080"},
		{originKey, ""}, // not a browser
		{appKey, "https://evil.example"},
	} {
		c, resp, err := dialOrigin(tc.key, tc.origin)
		require.NoError(t, err, "%s from %q", tc.key, tc.origin)
		if resp.Body != nil { // a 101 has none
			_ = resp.Body.Close()
		}
		require.Equal(t, "pusher:connection_established", read(t, c).Event)
	}
}
