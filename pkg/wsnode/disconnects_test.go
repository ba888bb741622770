package wsnode_test

import (
	"net"
	"runtime"
	"testing"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/wsclient"
)

// TestDisconnectsByCloseCode: each socket that ends is counted once in
// headcount_wsnode_disconnects_total, under the close code it ended with,
// on both transports: a client's normal close (1000), a refused app key
// (4001, before the socket opens), a text message that is not UTF-8 (the
// node's 1007) and a TCP reset without any close frame (1006).
func TestDisconnectsByCloseCode(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{config.TransportGoroutine, config.TransportEventLoop} {
		t.Run(transport, func(t *testing.T) {
			if transport == config.TransportEventLoop && runtime.GOOS != "linux" {
				t.Skip("the event loop transport needs Linux")
			}
			n := startNode(t, func(c *config.WSNode) { c.Transport = transport }).run(t)
			want := map[string]float64{}
			ended := func(code string) {
				t.Helper()
				want[code]++
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					assert.Equal(c, want, disconnects(c, n.reg))
				}, wait, tick)
			}

			c, _ := n.connect(t)
			require.NoError(t, c.Close(websocket.StatusNormalClosure, "bye"))
			ended("1000")

			refused := dial(t, n.url("nope", pusherJSQuery))
			require.Equal(t, websocket.StatusCode(4001), closeStatus(t, refused))
			ended("4001")

			bad := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
			bad.read(t) // connection_established
			_, err := bad.Write(wsclient.TextFrame("\xff\xfe"))
			require.NoError(t, err)
			ended("1007")

			reset := dialRaw(t, n.Addr(), "/app/"+appKey+pusherJSQuery)
			reset.read(t)
			tcp, ok := reset.Conn.Conn.(*net.TCPConn)
			require.True(t, ok, "a raw connection is TCP")
			require.NoError(t, tcp.SetLinger(0)) // close sends RST
			require.NoError(t, tcp.Close())
			ended("1006")

			require.Equal(t, 0.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
		})
	}
}

// disconnects is headcount_wsnode_disconnects_total's series above zero,
// by code: a socket counted twice, or under another code, shows.
func disconnects(c require.TestingT, reg *prometheus.Registry) map[string]float64 {
	families, err := reg.Gather()
	require.NoError(c, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "headcount_wsnode_disconnects_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				got[m.GetLabel()[0].GetValue()] = v
			}
		}
	}
	return got
}
