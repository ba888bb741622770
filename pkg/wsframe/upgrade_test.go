package wsframe

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// hijackRecorder is a ResponseWriter websocket.Accept can hijack; it keeps
// the headers Accept set, which pkg/wsfront writes after the status line.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	hijacked http.Header
	conns    []net.Conn
}

func (w *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = w.Header().Clone()
	a, b := net.Pipe()
	w.conns = append(w.conns, a, b)
	return a, bufio.NewReadWriter(bufio.NewReader(a), bufio.NewWriter(a)), nil
}

var acceptOptions = &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled}

func goodRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/app/key?protocol=7", nil)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	return r
}

func upgradeCases() map[string]func(r *http.Request) {
	set := func(k, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set(k, v) } }
	del := func(k string) func(*http.Request) { return func(r *http.Request) { r.Header.Del(k) } }
	return map[string]func(*http.Request){
		"good":                  func(*http.Request) {},
		"connection list":       set("Connection", "keep-alive, Upgrade"),
		"connection lower case": set("Connection", "upgrade"),
		"connection two lines":  func(r *http.Request) { r.Header["Connection"] = []string{"keep-alive", " Upgrade "} },
		"upgrade mixed case":    set("Upgrade", "WebSocket"),
		"upgrade list":          set("Upgrade", "h2c, websocket"),
		"key with spaces":       set("Sec-WebSocket-Key", "  dGhlIHNhbXBsZSBub25jZQ== "),
		"extra headers": func(r *http.Request) {
			r.Header.Set("Origin", "http://evil.example")
			r.Header.Set("Sec-WebSocket-Protocol", "chat")
			r.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate")
		},
		"http/1.0":                 func(r *http.Request) { r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.0", 1, 0 },
		"post":                     func(r *http.Request) { r.Method = http.MethodPost },
		"head":                     func(r *http.Request) { r.Method = http.MethodHead },
		"no connection":            del("Connection"),
		"connection close":         set("Connection", "close"),
		"connection upgrade2":      set("Connection", "Upgrade2"),
		"no upgrade":               del("Upgrade"),
		"upgrade h2c":              set("Upgrade", "h2c"),
		"upgrade websocket2":       set("Upgrade", "websocket2"),
		"no version":               del("Sec-WebSocket-Version"),
		"version 8":                set("Sec-WebSocket-Version", "8"),
		"version list":             set("Sec-WebSocket-Version", "13, 8"),
		"version with space":       set("Sec-WebSocket-Version", "13 "),
		"no key":                   del("Sec-WebSocket-Key"),
		"two keys":                 func(r *http.Request) { r.Header.Add("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==") },
		"key not base64":           set("Sec-WebSocket-Key", "not base64!"),
		"key of 15 bytes":          set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25j"),
		"empty key":                set("Sec-WebSocket-Key", ""),
		"post without upgrade":     func(r *http.Request) { r.Method = http.MethodPost; r.Header.Del("Upgrade") },
		"bad version and no key":   func(r *http.Request) { r.Header.Del("Sec-WebSocket-Key"); r.Header.Set("Sec-WebSocket-Version", "7") },
		"http/1.0 without headers": func(r *http.Request) { r.Proto, r.ProtoMinor = "HTTP/1.0", 0; r.Header = http.Header{} },
	}
}

// TestUpgradeAgainstAccept: for each request, websocket.Accept and this
// package answer with the same status, headers and body, and upgrade the
// same requests with the same 101 head.
func TestUpgradeAgainstAccept(t *testing.T) {
	for name, edit := range upgradeCases() {
		t.Run(name, func(t *testing.T) {
			r1, r2 := goodRequest(), goodRequest()
			edit(r1)
			edit(r2)
			coder := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
			c, err := websocket.Accept(coder, r1, acceptOptions)
			t.Cleanup(func() {
				for _, c := range coder.conns {
					_ = c.Close()
				}
			})
			ours := httptest.NewRecorder()
			refused := Refuse(ours, r2)
			if err != nil {
				require.True(t, refused)
				require.Equal(t, coder.Code, ours.Code)
				require.Equal(t, coder.Header(), ours.Header())
				require.Equal(t, coder.Body.String(), ours.Body.String())
				return
			}
			require.NotNil(t, c)
			require.False(t, refused)
			require.Zero(t, ours.Body.Len())
			var head bytes.Buffer
			head.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
			require.NoError(t, coder.hijacked.Write(&head))
			head.WriteString("\r\n")
			require.Equal(t, head.String(), string(AppendAcceptResponse(nil, r2.Header.Get("Sec-WebSocket-Key"))))
		})
	}
}

// TestAcceptResponseOverTCP: the 101 a net/http server sends for
// websocket.Accept has the headers AppendAcceptResponse writes (and a
// Date, which net/http adds).
func TestAcceptResponseOverTCP(t *testing.T) {
	srv := coderServer()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte(strings.Replace(upgradeRequest, "%d", "10", 1)))
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	ours, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(AppendAcceptResponse(nil, "dGhlIHNhbXBsZSBub25jZQ=="))), nil)
	require.NoError(t, err)
	_ = ours.Body.Close()
	require.Equal(t, resp.StatusCode, ours.StatusCode)
	resp.Header.Del("Date")
	require.Equal(t, resp.Header, ours.Header)
	require.Equal(t, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", AcceptKey("dGhlIHNhbXBsZSBub25jZQ==")) // RFC 6455 1.3
}
