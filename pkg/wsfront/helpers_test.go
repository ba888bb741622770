package wsfront_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/wsclient"
	"github.com/headcount/headcount/pkg/wsfront"
)

const (
	wait = 10 * time.Second
	tick = 10 * time.Millisecond
	// hello is the first message the test handler sends on an upgraded
	// socket, once it found the connection with Upgraded.
	hello = "hello from the handler"
	// path is a WebSocket URL as pusher-js opens it.
	path = "/app/app-key?protocol=7&client=js&version=8.4.0&flash=false"
)

// TestMain fails the package if any goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// front is what the tests use of a Front or a LoopFront.
type front interface {
	Addr() string
	Open() int
	MaxConns() int
	Shutdown(timeout time.Duration)
}

// The kinds of front every test runs against: the goroutine Front and,
// on Linux, the event loop's LoopFront (startLoopFront).
const (
	goroutineFront = "goroutine"
	loopFront      = "eventloop"
)

// kinds are the fronts this platform has.
var kinds = []string{goroutineFront}

// forEachFront runs test as a subtest per kind of front.
func forEachFront(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) { test(t, kind) })
	}
}

// testFront is a front serving on 127.0.0.1:0 whose handler upgrades as a
// Pusher node does (websocket.Accept, any origin, no compression, or its
// pkg/wsframe equivalent on the event loop), sends hello and echoes what
// the client sends until the test ends. It counts what the front refuses.
type testFront struct {
	front
	kind    string
	mu      sync.Mutex
	refused map[wsfront.Reason]int
}

// startFront serves a testFront of kind until the test ends; configure
// runs before Serve, on the front.
func startFront(t *testing.T, kind string, opts wsfront.Options, configure ...func(wsfront.HeadTimer)) *testFront {
	t.Helper()
	tf := &testFront{kind: kind, refused: map[wsfront.Reason]int{}}
	opts.Logger = logging.TestLogger(t)
	opts.OnRefuse = func(r wsfront.Reason) {
		tf.mu.Lock()
		defer tf.mu.Unlock()
		tf.refused[r]++
	}
	if kind == loopFront {
		tf.front = startLoopFront(t, opts, configure...)
		return tf
	}
	ctx, cancel := context.WithCancel(context.Background())
	var sockets sync.WaitGroup
	opts.Handler = func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			InsecureSkipVerify: true,
			CompressionMode:    websocket.CompressionDisabled,
		})
		if err != nil {
			return // Accept has answered with an HTTP error
		}
		sockets.Add(1)
		defer sockets.Done()
		defer c.CloseNow()
		greeting := hello
		if wsfront.Upgraded(w) == nil {
			greeting = "Upgraded has no connection"
		}
		if c.Write(ctx, websocket.MessageText, []byte(greeting)) != nil {
			return
		}
		for {
			typ, b, err := c.Read(ctx)
			if err != nil || c.Write(ctx, typ, b) != nil {
				return
			}
		}
	}
	f, err := wsfront.Listen("127.0.0.1:0", opts)
	require.NoError(t, err)
	tf.front = f
	for _, c := range configure {
		c(f)
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve() }()
	t.Cleanup(func() {
		f.Shutdown(wait)
		require.NoError(t, <-served)
		cancel() // upgraded sockets are the handler's to close
		sockets.Wait()
	})
	return tf
}

// startLoopFront serves a LoopFront until the test ends (Linux only).
var startLoopFront func(t *testing.T, opts wsfront.Options, configure ...func(wsfront.HeadTimer)) front

// refusals is how many times the front counted reason r.
func (tf *testFront) refusals(r wsfront.Reason) int {
	tf.mu.Lock()
	defer tf.mu.Unlock()
	return tf.refused[r]
}

// rawRequest sends head on a fresh connection to f and returns the
// response; the front closes the connection after anything but a 101.
func rawRequest(t *testing.T, f *testFront, head string) (*http.Response, string) {
	t.Helper()
	resp, body, err := wsclient.Request(f.Addr(), head, wait)
	require.NoError(t, err, "the body ends where Content-Length says")
	return resp, body
}

// rawConn is an upgraded client connection on a bare net.Conn.
type rawConn struct{ *wsclient.Conn }

// dialRaw upgrades path on a fresh connection to f.
func dialRaw(t *testing.T, f *testFront) *rawConn {
	t.Helper()
	c, err := wsclient.Dial(f.Addr(), path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{c}
}

// read returns the payload of the next unfragmented frame.
func (r *rawConn) read(t *testing.T) string {
	t.Helper()
	p, err := r.Read(wait)
	require.NoError(t, err)
	return p
}

const upgradeHeaders = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// upgradeHead is a whole upgrade request for path.
const upgradeHead = "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n"
