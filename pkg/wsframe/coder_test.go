package wsframe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// coderServer is the reference: a coder/websocket server as wsnode runs
// it (Accept with these options, SetReadLimit, whole messages read with
// Reader and io.ReadAll, CloseNow when a read fails), echoing each
// message. The read limit comes in the query (?limit=).
var coderServer = sync.OnceValue(func() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			InsecureSkipVerify: true,
			CompressionMode:    websocket.CompressionDisabled,
		})
		if err != nil {
			return
		}
		limit, _ := strconv.ParseInt(r.URL.Query().Get("limit"), 10, 64)
		c.SetReadLimit(limit)
		defer func() { _ = c.CloseNow() }()
		for {
			typ, rd, err := c.Reader(context.Background())
			if err != nil {
				return
			}
			b, err := io.ReadAll(rd)
			if err != nil {
				return
			}
			if bytes.HasPrefix(b, closeTrigger) {
				// As wsnode closes a socket from its reader (invalid
				// UTF-8, a refusal): close frame, then wait for the client's.
				_ = c.Close(4000, "bye")
				return
			}
			if err := c.Write(context.Background(), typ, b); err != nil {
				return
			}
		}
	}))
})

const upgradeRequest = "GET /?limit=%d HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

// closeTrigger starts a message the reference server answers with
// Conn.Close(4000, "bye").
var closeTrigger = []byte("close:")

// askCoder sends stream to the coder/websocket server after a handshake,
// half-closes, and returns all it sends back after its 101.
func askCoder(t testing.TB, stream []byte, limit int64) []byte {
	t.Helper()
	srv := coderServer()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	req := strings.Replace(upgradeRequest, "%d", strconv.FormatInt(limit, 10), 1)
	_, err = c.Write([]byte(req))
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_ = resp.Body.Close() // a 101 has no body; the stream follows in br
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	// Write and read at once: the server may close before reading it all.
	go func() {
		_, _ = c.Write(stream)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	out, err := io.ReadAll(br)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		require.NoError(t, err)
	}
	return out
}

// TestAgainstCoder: for every case, coder/websocket's server sends back
// what the Decoder's events make, in every chunking of the stream, but
// where the node parts from coder on purpose.
func TestAgainstCoder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range streamCases() {
		t.Run(c.name, func(t *testing.T) {
			got := askCoder(t, c.stream, c.limit)
			require.Equal(t, string(c.want), string(got), "coder/websocket")
			if c.parts {
				got = c.node
			}
			for _, ch := range chunkings(r, len(c.stream)) {
				out, _, _ := serve(c.stream, ch, c.limit)
				require.Equal(t, string(got), string(out), "chunks %v", ch)
			}
		})
	}
}

// partsFromCoder reports whether the Decoder fails stream where the node
// parts from coder on purpose (the package doc): an unmasked frame (1002,
// where coder just closes), a length past the limit (1009 at the header,
// where coder waits for limit+1 bytes) and a close reason that is not
// UTF-8 (1007, where coder echoes it).
func partsFromCoder(stream []byte, limit int64) bool {
	var d Decoder
	parts := false
	decodeReads(&d, stream, nil, limit, func(_ []byte, ev Event, _ int) {
		parts = parts || ev.Kind == Fail && (errors.Is(ev.Err, errUnmasked) || errors.Is(ev.Err, errCloseReason) ||
			ev.Code == StatusMessageTooBig)
	}, nil)
	return parts
}

// askCoderOpen sends stream to the coder/websocket server, keeping its
// side open, and returns what the server sends back within wait and
// whether it closed the connection by then.
func askCoderOpen(t testing.TB, stream []byte, limit int64, wait time.Duration) ([]byte, bool) {
	t.Helper()
	srv := coderServer()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	req := strings.Replace(upgradeRequest, "%d", strconv.FormatInt(limit, 10), 1)
	_, err = c.Write([]byte(req))
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	_, err = c.Write(stream)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	out, err := io.ReadAll(br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return out, false
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		require.NoError(t, err)
	}
	return out, true
}

// serveOpen is serve for a stream the client keeps open. It returns what
// the server sends and whether it closes the connection.
func serveOpen(stream []byte, chunks []int, limit int64) ([]byte, bool) {
	var d Decoder
	out, _, ended := decodeReads(&d, stream, chunks, limit, nil, nil)
	return out, ended
}

// TestAfterCloseAgainstCoder: once the server sent its close frame, coder
// skips data frames and waits for the client's close frame (5 s), and
// ends the connection on a ping or a protocol error, sending nothing
// more; the Decoder after SentClose tells the loop the same.
func TestAfterCloseAgainstCoder(t *testing.T) {
	trigger := cf(finText, "close:now")
	long := strings.Repeat("x", 100)
	cases := map[string][]byte{
		"nothing more":             trigger,
		"client close":             cat(trigger, cf(finClose, closePayload(1000, "ok"))),
		"ping":                     cat(trigger, cf(finPing, "p")),
		"pong":                     cat(trigger, cf(finPong, "p")),
		"messages skipped":         cat(trigger, cf(finText, "a"), cf(finBinary, "b")),
		"over the limit skipped":   cat(trigger, cf(finText, long), cf(finClose, "")),
		"continuation first":       cat(trigger, cf(finCont, "a")),
		"text inside a message":    cat(trigger, cf(text, "a"), cf(finText, "b")),
		"rsv":                      cat(trigger, cf(0xc1, "a")),
		"unmasked":                 cat(trigger, unmasked(finText, "a")),
		"unknown opcode":           cat(trigger, cf(0x83, "a")),
		"close one byte":           cat(trigger, cf(finClose, "\x03")),
		"message then close":       cat(cf(finText, "hi"), trigger, cf(finText, "skipped"), cf(finClose, closePayload(4001, ""))),
		"ping in skipped fragment": cat(trigger, cf(text, "a"), cf(finPing, "p")),
	}
	r := rand.New(rand.NewPCG(7, 8))
	chunks := map[string][][]int{}
	for name, s := range cases {
		chunks[name] = chunkings(r, len(s))
	}
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, closed := askCoderOpen(t, stream, 64, time.Second)
			require.True(t, bytes.HasSuffix(got, AppendClose(nil, 4000, "bye")), "coder sent %q", got)
			for _, ch := range chunks[name] {
				out, ended := serveOpen(stream, ch, 64)
				require.Equal(t, string(got), string(out), "chunks %v", ch)
				require.Equal(t, closed, ended, "coder closed the connection: %v; chunks %v", closed, ch)
			}
		})
	}
}
