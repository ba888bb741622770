package redistest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// rawPing sends PING on c and returns the reply line, or the read error
// after timeout.
func rawPing(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	return r.ReadString('\n')
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestProxyPartitionAndHeal: a partition answers nothing and closes
// nothing, on old and new connections alike, while the server itself is
// fine; healing closes those connections and forwards new ones.
func TestProxyPartitionAndHeal(t *testing.T) {
	srv := New(t)
	p := NewProxy(t, srv.Addr)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	old, oldR := dial()
	if line, err := rawPing(t, old, oldR, 5*time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("through the proxy: %q, %v", line, err)
	}

	p.Partition()
	if line, err := rawPing(t, old, oldR, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("existing connection during a partition: got %q, %v; want a timeout", line, err)
	}
	during, duringR := dial()
	if line, err := rawPing(t, during, duringR, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection during a partition: got %q, %v; want a timeout", line, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); !isTimeout(err) {
		t.Fatalf("go-redis during a partition: %v; want a timeout", err)
	}
	if err := srv.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the server itself: %v", err)
	}

	p.Heal()
	for name, c := range map[string]struct {
		conn net.Conn
		r    *bufio.Reader
	}{"existing": {old, oldR}, "accepted during": {during, duringR}} {
		_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.r.ReadString('\n'); !errors.Is(err, io.EOF) {
			t.Fatalf("%s connection after heal: %v; want it closed (EOF), the dropped PING unanswered", name, err)
		}
	}
	fresh, freshR := dial()
	if line, err := rawPing(t, fresh, freshR, 5*time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("new connection after heal: %q, %v", line, err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("go-redis after heal: %v", err)
	}
}

// TestProxyPassesServerRestart: outside a partition, the server closing a
// connection closes the client's, and new connections reach the restarted
// server.
func TestProxyPassesServerRestart(t *testing.T) {
	srv := New(t)
	p := NewProxy(t, srv.Addr)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if line, err := rawPing(t, c, r, 5*time.Second); err != nil || line != "+PONG\r\n" {
		t.Fatalf("through the proxy: %q, %v", line, err)
	}
	srv.Restart(t)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after the server restarted: %v; want EOF", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("new connection to the restarted server: %v", err)
	}
}
