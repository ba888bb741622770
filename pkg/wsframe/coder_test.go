package wsframe

import (
	"bufio"
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
			if err := c.Write(context.Background(), typ, b); err != nil {
				return
			}
		}
	}))
})

const upgradeRequest = "GET /?limit=%d HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
	"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

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
// what the Decoder's events make, in every chunking of the stream.
func TestAgainstCoder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range streamCases() {
		t.Run(c.name, func(t *testing.T) {
			got := askCoder(t, c.stream, c.limit)
			require.Equal(t, string(c.want), string(got), "coder/websocket")
			for _, ch := range chunkings(r, len(c.stream)) {
				out, _, _ := serve(c.stream, ch, c.limit)
				require.Equal(t, string(got), string(out), "chunks %v", ch)
			}
		})
	}
}
