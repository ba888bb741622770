package wsfront_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/evloop"
	"github.com/headcount/headcount/pkg/wsframe"
	"github.com/headcount/headcount/pkg/wsfront"
)

func init() {
	kinds = append(kinds, loopFront)
	startLoopFront = func(t *testing.T, opts wsfront.Options, configure ...func(wsfront.HeadTimer)) front {
		return serveLoop(t, opts, echoUpgrade, configure...)
	}
}

// serveLoop serves a LoopFront with upgrade until the test ends: the
// cleanup shuts it down (Serve must return nil), then closes it.
func serveLoop(t *testing.T, opts wsfront.Options, upgrade wsfront.UpgradeFunc, configure ...func(wsfront.HeadTimer)) *wsfront.LoopFront {
	t.Helper()
	f, err := wsfront.ListenLoop("127.0.0.1:0", opts, upgrade)
	require.NoError(t, err)
	for _, c := range configure {
		c(f)
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve() }()
	t.Cleanup(func() {
		f.Shutdown(wait)
		require.NoError(t, <-served)
		require.NoError(t, f.Close()) // upgraded sockets end here
	})
	return f
}

// echoUpgrade upgrades as websocket.Accept does (wsframe.Refuse answers
// what Accept refuses), sends hello with the 101, then echoes every
// message: the early bytes first, then what the loop reads.
func echoUpgrade(c *evloop.Conn, w http.ResponseWriter, r *http.Request, early []byte) bool {
	if wsframe.Refuse(w, r) {
		return false
	}
	e := &echo{}
	c.SetHandler(e)
	_, _ = c.Write(wsframe.AppendAcceptResponse(nil, r.Header.Get("Sec-WebSocket-Key")),
		wsframe.AppendFrame(nil, wsframe.OpText, []byte(hello)))
	if len(early) > 0 {
		e.OnData(c, early)
	}
	c.ResumeRead()
	return true
}

// echo is an upgraded socket's handler: it sends back each message, and
// answers pings and the close handshake as coder/websocket does.
type echo struct {
	mu  sync.Mutex // OnData runs on the upgrade's goroutine, then the loop
	dec wsframe.Decoder
}

func (e *echo) OnData(c *evloop.Conn, b []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		ev, n := e.dec.Next(b, 1<<20)
		b = b[n:]
		switch ev.Kind {
		case wsframe.None:
			return
		case wsframe.Message:
			_, _ = c.Write(wsframe.AppendFrame(nil, ev.Op, ev.Payload))
		case wsframe.Ping:
			_, _ = c.Write(ev.Reply(nil))
		case wsframe.Close, wsframe.Fail:
			_, _ = c.Write(ev.Reply(nil))
			c.CloseAfterFlush()
			return
		}
	}
}

func (*echo) OnDrained(*evloop.Conn)      {}
func (*echo) OnClose(*evloop.Conn, error) {}
