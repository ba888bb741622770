package wsclient

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Conn is one raw client connection.
type Conn struct {
	net.Conn
	br *bufio.Reader
}

// Dial connects to addr and upgrades path (e.g. /app/key?protocol=7).
func Dial(addr, path string) (*Conn, error) {
	return DialWith(&net.Dialer{Timeout: 10 * time.Second}, addr, path)
}

// DialWith is Dial through d (a load tool sets d.LocalAddr to spread its
// sockets over source addresses). The handshake is written and its answer
// read by hand, without net/http: a load tool's cost per socket should be
// the server's, not the client library's.
func DialWith(d *net.Dialer, addr, path string) (*Conn, error) {
	return DialSending(d, addr, path, nil)
}

// DialSending is DialWith whose handshake request carries early, a
// client's first frames, in the same write (as a browser's may).
func DialSending(d *net.Dialer, addr, path string, early []byte) (*Conn, error) {
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	var key [16]byte
	_, _ = rand.Read(key[:]) // never fails (crypto/rand)
	req := make([]byte, 0, 192+len(path)+len(addr))
	req = append(append(append(req, "GET "...), path...), " HTTP/1.1\r\nHost: "...)
	req = append(append(req, addr...), "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "...)
	req = base64.StdEncoding.AppendEncode(req, key[:])
	req = append(req, "\r\nSec-WebSocket-Version: 13\r\n\r\n"...)
	req = append(req, early...)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 512)
	if err := readUpgrade(br); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return &Conn{Conn: c, br: br}, nil
}

// NewConn wraps c, upgraded by a handshake of the caller's own whose
// answer br has read.
func NewConn(c net.Conn, br *bufio.Reader) *Conn { return &Conn{Conn: c, br: br} }

// Request sends head (a whole HTTP/1.1 request as bytes on the wire) on a
// fresh connection to addr and returns the answer and its body, waiting at
// most timeout in all.
func Request(addr, head string, timeout time.Duration) (*http.Response, string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, "", err
	}
	if _, err := io.WriteString(c, head); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// readUpgrade reads a response head and requires a 101.
func readUpgrade(br *bufio.Reader) error {
	status, err := br.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("reading the upgrade answer: %w", err)
	}
	if !bytes.HasPrefix(status, []byte("HTTP/1.1 101 ")) {
		return fmt.Errorf("upgrade answered %q", bytes.TrimSpace(status))
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("reading the upgrade answer: %w", err)
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// Send writes one masked text frame (clients must mask).
func (c *Conn) Send(payload string) error {
	_, err := c.Write(TextFrame(payload))
	return err
}

// TextFrame is payload as a client's masked text frame.
func TextFrame(payload string) []byte {
	mask := [4]byte{1, 2, 3, 4}
	b := make([]byte, 0, 14+len(payload))
	b = append(b, 0x81)
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126, byte(n>>8), byte(n)) //nolint:gosec // G115: n <= 0xffff here
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, mask[:]...)
	for i := range len(payload) {
		b = append(b, payload[i]^mask[i%4])
	}
	return b
}

// Read returns the payload of the next unfragmented frame, waiting at most
// timeout; 0 leaves the deadline as it is (none, unless set), which spares
// a benchmark's readers a timer update per frame.
func (c *Conn) Read(timeout time.Duration) (string, error) {
	if timeout > 0 {
		if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return "", err
		}
	}
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return "", err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return "", err
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(c.br, l[:]); err != nil {
			return "", err
		}
		n = binary.BigEndian.Uint64(l[:])
	}
	if n > 1<<20 {
		return "", fmt.Errorf("frame of %d bytes is too large for a test client", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(c.br, p); err != nil {
		return "", err
	}
	return string(p), nil
}
