package wsfront_test

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/wsclient"
	"github.com/headcount/headcount/pkg/wsfront"
)

// The port answers everything but an upgrade of a WebSocket path
// (/app/{key}, /r/{id}/app/{key}) with an HTTP error and closes, without
// calling the handler, and counts each refusal, the handler's
// (websocket.Accept's) included.
func TestFrontRefusals(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{})
		for _, tc := range []struct {
			name, head string
			status     int
			body       string
		}{
			{"not an upgrade", "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusUpgradeRequired, "Upgrade"},
			{"other path", "GET /metrics HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "/app/{key}"},
			{"nested path", "GET /app/app-key/x HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "/app/{key}"},
			{"no key", "GET /app/ HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "/app/{key}"},
			{"resume id too short", "GET /r/abc/app/app-key HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "resume id"},
			{"resume id too long", "GET /r/" + strings.Repeat("a", 65) + "/app/app-key HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "resume id"},
			{"resume id with a dot", "GET /r/abcd.efgh/app/app-key HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "resume id"},
			{"resume id escaping a slash", "GET /r/abcd%2Fefgh/app/app-key HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "/app/{key}"},
			{"resume id alone", "GET /r/abcdefgh HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusNotFound, "/r/{id}/app/{key}"},
			{"POST", "POST " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "Content-Length: 0\r\n\r\n", http.StatusMethodNotAllowed, "GET"},
			{"body", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "Content-Length: 5\r\n\r\nhello", http.StatusBadRequest, "no body"},
			{"chunked body", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", http.StatusBadRequest, "no body"},
			{"no Host", "GET " + path + " HTTP/1.1\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "Host"},
			{"two Hosts", "GET " + path + " HTTP/1.1\r\nHost: x\r\nHost: y\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "Host"},
			{"HTTP/1.0", "GET " + path + " HTTP/1.0\r\n" + upgradeHeaders + "\r\n", http.StatusUpgradeRequired, "HTTP/1.1"},
			{"bad version", "GET " + path + " HTTP/x\r\nHost: x\r\n\r\n", http.StatusBadRequest, "HTTP version"},
			{"bad request line", "GET\r\nHost: x\r\n\r\n", http.StatusBadRequest, "request line"},
			{"folded header", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + " folded\r\n\r\n", http.StatusBadRequest, "folded"},
			{"header without colon", "GET " + path + " HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n", http.StatusBadRequest, "header line"},
			{"bad escape", "GET /app/%zz HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "path"},
			{"old WebSocket version", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + strings.Replace(upgradeHeaders, "13", "8", 1) + "\r\n", http.StatusBadRequest, "13"},
			{"head too large", "GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "16384"},
			// What net/http's server refuses as well (with the same status).
			{"NUL in a header name", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "X-A\x00b: 1\r\n\r\n", http.StatusBadRequest, "header name"},
			{"space in a header name", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "X A: 1\r\n\r\n", http.StatusBadRequest, "header name"},
			{"control byte in a header value", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "X-A: a\x01b\r\n\r\n", http.StatusBadRequest, "header value"},
			{"DEL in a header value", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "X-A: a\x7fb\r\n\r\n", http.StatusBadRequest, "header value"},
			{"bare CR in a header value", "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "X-A: a\rb\r\n\r\n", http.StatusBadRequest, "header value"},
			{"bare CR in Host", "GET " + path + " HTTP/1.1\r\nHost: a\rb\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "header value"},
			{"malformed Host", "GET " + path + " HTTP/1.1\r\nHost: a b\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "Host"},
			{"empty Host", "GET " + path + " HTTP/1.1\r\nHost: \r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "Host"},
			{"empty Host without a space", "GET " + path + " HTTP/1.1\r\nHost:\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "Host"},
			{"HTTP/9.9", "GET " + path + " HTTP/9.9\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusHTTPVersionNotSupported, "HTTP/1"},
			{"HTTP/2.0", "GET " + path + " HTTP/2.0\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusHTTPVersionNotSupported, "HTTP/1"},
			{"invalid method", "G(T " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "method"},
			{"control byte in the target", "GET /app/app-key\x01 HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n", http.StatusBadRequest, "control byte"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp, body := rawRequest(t, f, tc.head)
				require.Equal(t, tc.status, resp.StatusCode, body)
				require.Contains(t, body, tc.body)
				require.True(t, resp.Close, "Connection: close")
			})
		}
		require.Equal(t, 35, f.refusals(wsfront.Refused))
		require.Zero(t, f.refusals(wsfront.AtCap))
		require.Zero(t, f.refusals(wsfront.AcceptFailed))
	})
}

// A refusal reaches a client that is still sending: the front answers a
// head over the limit with 431 while the client goes on writing it (as a
// client that reads only once it has sent its request does), and the
// connection ends with a clean close after the answer. Closing with the
// client's bytes unread would reset the connection instead, failing the
// client's writes and, if the reset arrives first, discarding the answer.
func TestFrontRefusalReachesClientStillSending(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{})
		c, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
		_, err = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nX-Big: ")
		require.NoError(t, err)
		chunk := []byte(strings.Repeat("a", 16<<10))
		for i := range 256 { // 4 MiB, more than the two sides' socket buffers hold
			_, err = c.Write(chunk)
			require.NoError(t, err, "write %d: the front reset the connection while the client was sending", i)
		}
		_, err = io.WriteString(c, "\r\n\r\n")
		require.NoError(t, err)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(body), "16384")
		_, err = br.ReadByte()
		require.ErrorIs(t, err, io.EOF, "a clean close after the answer, not a reset")
	})
}

// Header names are case-insensitive, bare line feeds end lines as net/http
// allows, a key is unescaped as net/http's router did, values may hold tabs
// and bytes past ASCII, real clients' heads are upgraded, and so is a
// path with a resume id.
func TestFrontLenientHeads(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{})
		heads := []string{
			"GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders +
				"User-Agent: caf\xc3\xa9\tand \xff\r\nX-Empty:\r\nX-Padded: \t a \t\r\n\r\n",
		}
		// Real clients' heads, with RFC 6455's example nonce.
		nonce := regexp.MustCompile(`Sec-WebSocket-Key: [^\r]*`)
		for _, name := range slices.Sorted(maps.Keys(wsfront.RealHeads)) {
			heads = append(heads, nonce.ReplaceAllString(wsfront.RealHeads[name], "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
		}
		for _, head := range append(heads, []string{
			"GET " + path + " HTTP/1.1\r\nhost: x\r\nupgrade: WebSocket\r\nCONNECTION: keep-alive, Upgrade\r\n" +
				"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n",
			"GET " + path + " HTTP/1.1\nHost: x\n" + strings.ReplaceAll(upgradeHeaders, "\r\n", "\n") + "\n",
			"GET /app/app%2Dkey?protocol=7 HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n",
			// pusher-js's URL with wsPath "/r/"+id, ids at both ends of
			// their length.
			"GET /r/page_-09/app/app-key?protocol=7 HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n",
			"GET /r/" + strings.Repeat("Z", 64) + "/app/app-key?protocol=7 HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n",
		}...) {
			c, err := net.Dial("tcp", f.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			_, err = io.WriteString(c, head)
			require.NoError(t, err)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			_ = resp.Body.Close() // a 101 has no body: the socket's frames follow
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode, "%q", head)
			// RFC 6455's example key.
			require.Equal(t, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", resp.Header.Get("Sec-WebSocket-Accept"))
			r := &rawConn{wsclient.NewConn(c, br)}
			require.Equal(t, hello, r.read(t))
		}
	})
}

// What a client sends behind its request head, in the same write, is
// read by the upgraded socket before anything else; the 101 goes out
// first.
func TestFrontEarlyBytes(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		for _, tc := range []struct {
			name string
			opts wsfront.Options
		}{
			{"plain", wsfront.Options{}},
			{"own hijack", wsfront.Options{Hijack: func(c *wsfront.Conn, early, response []byte) (net.Conn, *bufio.ReadWriter) {
				// Hold the 101 until the first write, as a node does.
				conn := &heldConn{Conn: c, r: io.MultiReader(bytes.NewReader(early), c), pending: response}
				return conn, bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
			}}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.opts.Hijack != nil && kind == loopFront {
					t.Skip("a LoopFront hands over an evloop.Conn: no Hijack")
				}
				f := startFront(t, kind, tc.opts)
				c, err := net.Dial("tcp", f.Addr())
				require.NoError(t, err)
				defer c.Close()
				head := "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n"
				_, err = c.Write(append([]byte(head), append(wsclient.TextFrame("one"), wsclient.TextFrame("two")...)...))
				require.NoError(t, err)
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				_ = resp.Body.Close() // a 101 has no body: the socket's frames follow
				require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
				r := &rawConn{wsclient.NewConn(c, br)}
				require.Equal(t, hello, r.read(t))
				require.Equal(t, "one", r.read(t))
				require.Equal(t, "two", r.read(t))
			})
		}
	})
}

// heldConn reads r and sends pending with its first write.
type heldConn struct {
	*wsfront.Conn
	r       io.Reader
	pending []byte
}

func (c *heldConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *heldConn) Write(p []byte) (int, error) {
	if c.pending != nil {
		b := append(c.pending, p...)
		c.pending = nil
		n, err := c.Conn.Write(b)
		return max(n-(len(b)-len(p)), 0), err
	}
	return c.Conn.Write(p)
}

// A connection that does not finish its request head in time is closed by
// the sweep, and so are those still reading theirs at Shutdown; neither
// leaves a goroutine behind (TestMain checks at exit).
func TestFrontHeadTimeout(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{}, func(f wsfront.HeadTimer) { f.SetHeadTimeout(300*time.Millisecond, 50*time.Millisecond) })
		slow, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		defer slow.Close()
		_, err = io.WriteString(slow, "GET /app/app-key HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
		require.NoError(t, slow.SetReadDeadline(time.Now().Add(wait)))
		start := time.Now()
		_, err = slow.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "closed without an answer")
		require.Less(t, time.Since(start), wait/2)

		// Shutdown closes a connection that sent nothing yet, long before its
		// head timeout (the default 10 s) would.
		f = startFront(t, kind, wsfront.Options{})
		silent, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		defer silent.Close()
		// A socket served after it proves the silent connection was accepted
		// before the shutdown. It is closed first so only the silent one is left.
		c := dialRaw(t, f)
		require.Equal(t, hello, c.read(t))
		require.NoError(t, c.Close())
		require.Eventually(t, func() bool { return f.Open() == 1 }, wait, tick)
		stopped := time.Now()
		f.Shutdown(wait)
		require.NoError(t, silent.SetReadDeadline(time.Now().Add(wait)))
		_, err = silent.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF)
		require.Less(t, time.Since(stopped), 5*time.Second, "closed by the shutdown, not the head timeout")
	})
}

// The port holds at most MaxConns connections, handshaking or upgraded:
// one past it is answered portcap's 503 (read intact by the client) and
// closed, and a closed connection gives its place back.
func TestFrontSocketCap(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{MaxConns: 3})
		require.Equal(t, 3, f.MaxConns())

		a := dialRaw(t, f)
		require.Equal(t, hello, a.read(t))
		b := dialRaw(t, f)
		require.Equal(t, hello, b.read(t))
		silent, err := net.Dial("tcp", f.Addr()) // still to send its head: counted all the same
		require.NoError(t, err)
		defer silent.Close()
		require.Eventually(t, func() bool { return f.Open() == 3 }, wait, tick)

		head := "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n"
		for range 2 {
			resp, body := rawRequest(t, f, head)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			require.Contains(t, body, "--max-sockets")
			require.Equal(t, "1", resp.Header.Get("Retry-After"), "every capped port's refusal (portcap)")
			require.True(t, resp.Close)
		}
		require.Equal(t, 2, f.refusals(wsfront.AtCap))
		require.Equal(t, 3, f.Open(), "refused connections are not counted")

		require.NoError(t, silent.Close())
		require.Eventually(t, func() bool { return f.Open() == 2 }, wait, tick)
		c := dialRaw(t, f)
		require.Equal(t, hello, c.read(t))

		for _, s := range []*rawConn{a, b, c} {
			require.NoError(t, s.Close())
		}
		require.Eventually(t, func() bool { return f.Open() == 0 }, wait, tick, "every way a socket ends gives its place back")
	})
}

// TestFrontUp: with Options.Up, GET and HEAD /up answer 200 or 503 as Up
// says, and neither counts as a refusal; without it, /up is a 404 like any
// path other than /app/{key}.
func TestFrontUp(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		var up atomic.Bool
		f := startFront(t, kind, wsfront.Options{Up: up.Load})
		for _, tc := range []struct {
			ready  bool
			head   string
			status int
			body   string
		}{
			{false, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusServiceUnavailable, "not ready\n"},
			{true, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusOK, "ok\n"},
			{true, "GET /up?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusOK, "ok\n"},
			{true, "HEAD /up HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusOK, ""},
			{false, "HEAD /up HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusServiceUnavailable, ""},
		} {
			up.Store(tc.ready)
			resp, body := rawRequest(t, f, tc.head)
			require.Equal(t, tc.status, resp.StatusCode, tc.head)
			require.Equal(t, tc.body, body, tc.head)
			require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		}
		require.Zero(t, f.refusals(wsfront.Refused), "a probe is not a refusal, ready or not")

		resp, body := rawRequest(t, f, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
		require.Equal(t, 1, f.refusals(wsfront.Refused))

		// The WebSocket endpoint is unaffected.
		require.Equal(t, hello, dialRaw(t, f).read(t))

		without := startFront(t, kind, wsfront.Options{})
		resp, body = rawRequest(t, without, "GET /up HTTP/1.1\r\nHost: x\r\n\r\n")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	})
}

// Connections refused at the cap hold no place under it while they linger:
// with two refused clients still connected (reading their 503 and waiting
// for the end), a place given back goes to the next client.
func TestFrontSocketCapRefusalsHoldNoPlace(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{MaxConns: 2})
		a := dialRaw(t, f)
		require.Equal(t, hello, a.read(t))
		silent, err := net.Dial("tcp", f.Addr())
		require.NoError(t, err)
		defer silent.Close()
		require.Eventually(t, func() bool { return f.Open() == 2 }, wait, tick)

		head := "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "\r\n"
		for range 2 {
			c, err := net.Dial("tcp", f.Addr())
			require.NoError(t, err)
			defer c.Close() // after the test: the front lingers meanwhile
			require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
			_, err = io.WriteString(c, head)
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		}
		require.Equal(t, 2, f.Open(), "refused connections are not counted")

		require.NoError(t, silent.Close())
		require.Eventually(t, func() bool { return f.Open() == 1 }, wait, tick)
		require.Equal(t, hello, dialRaw(t, f).read(t), "the place given back is free")
		require.Equal(t, 2, f.refusals(wsfront.AtCap))
	})
}

// A head that arrives a byte at a time, its blank line split across
// reads, is read whole; a head of exactly 16 KiB is upgraded, one byte
// more is refused with 431; a client that half-closes after its head is
// answered before the connection ends.
func TestFrontHeadEdges(t *testing.T) {
	forEachFront(t, func(t *testing.T, kind string) {
		f := startFront(t, kind, wsfront.Options{})
		t.Run("byte by byte", func(t *testing.T) {
			c, err := net.Dial("tcp", f.Addr())
			require.NoError(t, err)
			defer c.Close()
			for i := range len(upgradeHead) {
				_, err = io.WriteString(c, upgradeHead[i:i+1])
				require.NoError(t, err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			require.Equal(t, hello, (&rawConn{wsclient.NewConn(c, br)}).read(t))
		})
		pad := func(size int) string {
			head := "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + upgradeHeaders + "X-Pad: "
			return head + strings.Repeat("a", size-len(head)-len("\r\n\r\n")) + "\r\n\r\n"
		}
		for _, tc := range []struct {
			size   int
			status int
		}{{16 << 10, http.StatusSwitchingProtocols}, {16<<10 + 1, http.StatusRequestHeaderFieldsTooLarge}} {
			c, err := net.Dial("tcp", f.Addr())
			require.NoError(t, err)
			defer c.Close()
			head := pad(tc.size)
			require.Len(t, head, tc.size)
			_, err = io.WriteString(c, head)
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, "a head of %d bytes", tc.size)
		}
		for _, tc := range []struct {
			head   string
			status int
		}{{upgradeHead, http.StatusSwitchingProtocols}, {"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusNotFound}} {
			c, err := net.Dial("tcp", f.Addr())
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
			_, err = io.WriteString(c, tc.head)
			require.NoError(t, err)
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.status == http.StatusSwitchingProtocols {
				require.Equal(t, hello, (&rawConn{wsclient.NewConn(c, br)}).read(t))
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			_, err = io.Copy(io.Discard, br)
			require.NoError(t, err, "then the end of the stream, not a reset")
		}
		require.Eventually(t, func() bool { return f.Open() <= 1 }, wait, tick) // the 16 KiB upgrade's, until cleanup
	})
}
