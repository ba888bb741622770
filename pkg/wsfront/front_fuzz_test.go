package wsfront

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Request heads real clients send to /app/{key}, captured from a listener:
// pusher-js 8.6.0 under Node (the ws transport) and the same pusher-js URL
// opened by Chromium 156. The fuzz target starts from them; the front's
// tests upgrade them.
var realHeads = map[string]string{
	"pusher-js on Node": "GET /app/app-key?protocol=7&client=js&version=8.6.0&flash=false HTTP/1.1\r\n" +
		"Host: 127.0.0.1:38643\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: e4cLAJ0UHJlqSdKZZMoJRw==\r\nSec-WebSocket-Version: 13\r\n\r\n",
	"Chromium": "GET /app/app-key?protocol=7&client=js&version=8.6.0&flash=false HTTP/1.1\r\n" +
		"Host: 127.0.0.1:33239\r\nConnection: Upgrade\r\nPragma: no-cache\r\nCache-Control: no-cache\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/156.0.0.0 Safari/537.36\r\n" +
		"Upgrade: websocket\r\nOrigin: http://127.0.0.1:33239\r\nSec-WebSocket-Version: 13\r\n" +
		"Accept-Encoding: gzip, deflate, br, zstd\r\nAccept-Language: en-US,en;q=0.9\r\n" +
		"Sec-WebSocket-Key: hdq8rU+RlyjtIEbNFec9SQ==\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n",
}

// FuzzFrontHead feeds request heads to the front's parser and reads the
// same bytes with net/http's server: the parser must not panic, and every
// head it accepts must be accepted by net/http's server too (neither 400,
// 431 nor 505), which must see the same method, target, path, query, Host
// and upgrade headers. Heads the front refuses are not compared: it is
// stricter on purpose (no folded lines, no body, no empty Host). LoopFront
// parses with the same route and parseRequest, and finds a head's end with
// the same headEnd, so this holds it too; TestFrontHeadEdges checks how
// each front gathers a head across reads.
func FuzzFrontHead(f *testing.F) {
	for _, h := range realHeads {
		f.Add([]byte(h))
	}
	const path = "/app/app-key?protocol=7&client=js&version=8.6.0&flash=false"
	const upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	for _, h := range []string{
		"GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgrade + "\r\n",
		"GET " + path + " HTTP/1.1\nhost: x\nupgrade: websocket\nCONNECTION: keep-alive, Upgrade\n\n",
		"GET /app/key%2D1 HTTP/1.1\r\nHost: [::1]:6001\r\n" + upgrade + "User-Agent: caf\xc3\xa9\t\xff\r\nX-Padded: \t a \t\r\n\r\n",
		"GET " + path + " HTTP/1.0\r\n" + upgrade + "\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgrade + "Content-Length: 0\r\n\r\n",
		// Refused by the front; the fuzzer mutates them towards the edges.
		"GET " + path + " HTTP/1.1\r\nHost: x\r\nX-A\x00b: 1\r\n\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: a\rb\r\n\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: \r\n\r\n",
		"GET " + path + " HTTP/9.9\r\nHost: x\r\n\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
		"GET /app/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"G(T " + path + " HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		f.Add([]byte(h))
	}
	oracle := startHeadOracle(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		end := headEnd(data)
		if end < 0 || end > maxHead {
			return // readHead waits for more, or answers 431
		}
		head := data[:end]
		require.True(t, bytes.HasSuffix(head, []byte("\n\n")) || bytes.HasSuffix(head, []byte("\n\r\n")), "%q", head)
		r, err := parseRequest(head)
		if err != nil {
			return
		}
		status, seen := oracle.read(t, head)
		if status == http.StatusExpectationFailed {
			return // read, but an Expect the front ignores: not a parsing matter
		}
		require.Equal(t, http.StatusOK, status, "the front accepts a head net/http's server refuses: %q", head)
		require.Equal(t, seenRequest{
			Method: r.Method, RequestURI: r.RequestURI, Proto: r.Proto, Host: r.Host,
			Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header,
		}, seen, "%q", head)
	})
}

// seenRequest is what the oracle's handler saw of a request.
type seenRequest struct {
	Method, RequestURI, Proto, Host, Path, RawQuery string
	// Header holds the upgrade headers only, as the front keeps them.
	Header http.Header
}

// headOracle is a net/http server reached over in-memory pipes; its
// handler passes what it saw on seen (one request at a time: the fuzz
// function is not called concurrently within a process).
type headOracle struct {
	conns chan net.Conn
	seen  chan seenRequest
}

func startHeadOracle(f *testing.F) *headOracle {
	o := &headOracle{conns: make(chan net.Conn), seen: make(chan seenRequest, 1)}
	l := &pipeListener{conns: o.conns, done: make(chan struct{})}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			s := seenRequest{Method: r.Method, RequestURI: r.RequestURI, Proto: r.Proto, Host: r.Host,
				Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: http.Header{}}
			for _, k := range upgradeHeaders {
				if v := r.Header[k]; v != nil {
					s.Header[k] = v
				}
			}
			o.seen <- s
		}),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(l) }()
	f.Cleanup(func() { _ = srv.Close(); <-served })
	return o
}

// read sends head to the server and returns its status and, for a 200,
// what the handler saw.
func (o *headOracle) read(t *testing.T, head []byte) (int, seenRequest) {
	client, server := net.Pipe()
	defer client.Close()
	o.conns <- server
	wrote := make(chan struct{})
	go func() { defer close(wrote); _, _ = client.Write(head) }()
	defer func() { _ = client.Close(); <-wrote }()
	require.NoError(t, client.SetDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	require.NoError(t, err, "%q", head)
	defer resp.Body.Close()
	var s seenRequest
	if resp.StatusCode == http.StatusOK {
		s = <-o.seen
	}
	return resp.StatusCode, s
}

// pipeListener accepts the connections sent on conns.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
