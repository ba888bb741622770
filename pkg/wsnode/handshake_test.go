package wsnode_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/config"
)

// TestHandshakeResumeID: a socket opened on /r/{id}/app/{key}, as pusher-js
// opens it with wsPath "/r/"+id, is the app's like one on /app/{key} and
// carries the id, on either transport.
func TestHandshakeResumeID(t *testing.T) {
	t.Parallel()
	transports := []string{config.TransportGoroutine}
	if runtime.GOOS == "linux" {
		transports = append(transports, config.TransportEventLoop)
	}
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			n := startNode(t, func(c *config.WSNode) { c.Transport = transport }).run(t)
			const id = "page-0123_abcXYZ"
			c := dial(t, "ws://"+n.Addr()+"/r/"+id+"/app/"+appKey+pusherJSQuery)
			f := read(t, c)
			require.Equal(t, "pusher:connection_established", f.Event)
			require.Equal(t, id, n.ResumeID(f.data(t)["socket_id"].(string)))
			subscribe(t, c, "resumed")
			n.requireCounts(t, map[string]int64{"resumed": 1})

			_, socketID := n.connect(t)
			require.Empty(t, n.ResumeID(socketID), "no id on /app/{key}")
		})
	}
}
