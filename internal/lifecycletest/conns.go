package lifecycletest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// Conn is a raw client connection that stopped talking at Start.
type Conn struct {
	net.Conn
	// Start is when the client went quiet: for Idle, when the answer to
	// its request was read; for SlowBody, when the partial body was sent.
	// The server's timer for the connection started at about that moment.
	Start time.Time
	br    *bufio.Reader
}

// Idle opens n keep-alive connections to addr; each sends req (a whole raw
// HTTP/1.1 request), reads the answer and then stays silent. The
// connections are closed when the test ends.
func Idle(t testing.TB, addr, req string, n int) []*Conn {
	t.Helper()
	conns := make([]*Conn, 0, n)
	for range n {
		c := dial(t, addr)
		_, err := io.WriteString(c, req)
		if err != nil {
			t.Fatalf("lifecycletest: send a request to %s: %v", addr, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			t.Fatalf("lifecycletest: read the answer from %s: %v", addr, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.Close {
			t.Fatalf("lifecycletest: %s closes after its answer (%s); an idle keep-alive needs a request it keeps the connection for", addr, resp.Status)
		}
		c.Start = time.Now()
		conns = append(conns, c)
	}
	return conns
}

// SlowBody opens n connections to addr; each sends head (a request head
// announcing a body, ending in "\r\n\r\n") and the first bytes of the body,
// then nothing more. The connections are closed when the test ends.
func SlowBody(t testing.TB, addr, head, partial string, n int) []*Conn {
	t.Helper()
	conns := make([]*Conn, 0, n)
	for range n {
		c := dial(t, addr)
		if _, err := io.WriteString(c, head+partial); err != nil {
			t.Fatalf("lifecycletest: send a request head to %s: %v", addr, err)
		}
		c.Start = time.Now()
		conns = append(conns, c)
	}
	return conns
}

func dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("lifecycletest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &Conn{Conn: c, br: bufio.NewReader(c)}
}

// RequireCut checks that the server closes every connection no sooner
// than after/2 and no later than within after its Start: reading it ends
// in EOF (or a reset) before the deadline. It returns the status code of
// what the server answered before closing each connection, 0 for nothing.
// The deadlines are absolute, so checking the connections one after the
// other takes no longer than the last one's.
func RequireCut(t testing.TB, conns []*Conn, after, within time.Duration) []int {
	t.Helper()
	codes := make([]int, len(conns))
	for i, c := range conns {
		_ = c.SetReadDeadline(c.Start.Add(within))
		got, err := io.ReadAll(c.br)
		took := time.Since(c.Start)
		var ne net.Error
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("lifecycletest: connection %d of %d is still open %v after it went quiet (the server should cut it within %v); it sent %q",
				i+1, len(conns), took.Round(time.Millisecond), within, got)
		case err != nil && !errors.As(err, &ne): // a reset is a net.Error too
			t.Fatalf("lifecycletest: connection %d: %v", i+1, err)
		case took < after/2:
			t.Fatalf("lifecycletest: connection %d was closed after %v, well before %v: something other than the timeout closed it (it sent %q)",
				i+1, took.Round(time.Millisecond), after, got)
		}
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil); err == nil {
			codes[i] = resp.StatusCode
			_ = resp.Body.Close()
		}
		_ = c.Close()
	}
	return codes
}
