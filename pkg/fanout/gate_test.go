package fanout

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// gate is a loopback proxy to a Redis server that forwards each client's
// commands one at a time and, once a command matches holdFrom, holds it and
// every later one until released: a test can let Redis run some commands
// of a connection and not yet the next, as a slow network or a busy sender
// does. Replies pass freely.
type gate struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cond     *sync.Cond
	holdFrom func(cmd []string) bool
	holding  bool
	queue    [][]string // held, in order
	released int        // how many of queue may go
	closed   bool
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{ln: ln, target: target}
	g.cond = sync.NewCond(&g.mu)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { g.serve(c) })
		}
	})
	t.Cleanup(func() {
		g.mu.Lock()
		g.closed = true
		g.cond.Broadcast()
		g.mu.Unlock()
		_ = ln.Close()
		wg.Wait()
	})
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) serve(client net.Conn) {
	server, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = client.Close()
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer client.Close()
	defer server.Close()
	wg.Go(func() { _, _ = io.Copy(client, server); _ = client.Close() })
	// The reader takes every command at once, so the held ones can be
	// seen; the writer forwards them in order as they are released.
	type command struct {
		raw  []byte
		held int // index in g.queue, or -1
	}
	var pending []command
	readDone := false
	wg.Go(func() {
		r := bufio.NewReader(client)
		for {
			raw, cmd, err := readCommand(r)
			g.mu.Lock()
			if err != nil {
				readDone = true
				g.cond.Broadcast()
				g.mu.Unlock()
				return
			}
			c := command{raw: raw, held: -1}
			if g.holding || (g.holdFrom != nil && g.holdFrom(cmd)) {
				g.holding = true
				c.held = len(g.queue)
				g.queue = append(g.queue, cmd)
			}
			pending = append(pending, c)
			g.cond.Broadcast()
			g.mu.Unlock()
		}
	})
	for {
		g.mu.Lock()
		for !g.closed && !readDone && (len(pending) == 0 || pending[0].held >= g.released) {
			g.cond.Wait()
		}
		if g.closed || len(pending) == 0 || pending[0].held >= g.released {
			g.mu.Unlock()
			return
		}
		c := pending[0]
		pending = pending[1:]
		g.mu.Unlock()
		if _, err := server.Write(c.raw); err != nil {
			return
		}
	}
}

// hold starts holding at the first command that matches.
func (g *gate) hold(from func(cmd []string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holdFrom = from
}

// waitHeld waits until match has matched n of the held commands.
func (g *gate) waitHeld(t *testing.T, n int, match func(cmd []string) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		k := 0
		for _, c := range g.queue {
			if match(c) {
				k++
			}
		}
		return k >= n
	}, wait, tick, "held: %q", g.held())
}

func (g *gate) held() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]string(nil), g.queue...)
}

// releaseThrough lets the held commands go, up to and including the
// first one after those released already that matches.
func (g *gate) releaseThrough(match func(cmd []string) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.released < len(g.queue) {
		g.released++
		if match(g.queue[g.released-1]) {
			break
		}
	}
	g.cond.Broadcast()
}

// open lets everything go, held and to come.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holdFrom, g.holding = nil, false
	g.released = len(g.queue)
	g.cond.Broadcast()
}

// readCommand reads one RESP array of bulk strings, as clients send
// commands, returning its bytes and its arguments.
func readCommand(r *bufio.Reader) (raw []byte, cmd []string, err error) {
	var buf bytes.Buffer
	line := func() (string, error) {
		l, err := r.ReadString('\n')
		buf.WriteString(l)
		return strings.TrimRight(l, "\r\n"), err
	}
	head, err := line()
	if err != nil {
		return nil, nil, err
	}
	if !strings.HasPrefix(head, "*") {
		return nil, nil, fmt.Errorf("gate: not a command array: %q", head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil {
		return nil, nil, err
	}
	for range n {
		l, err := line()
		if err != nil {
			return nil, nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(l, "$"))
		if err != nil {
			return nil, nil, err
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(r, arg); err != nil {
			return nil, nil, err
		}
		buf.Write(arg)
		cmd = append(cmd, string(arg[:size]))
	}
	return buf.Bytes(), cmd, nil
}

// isCommand matches a command named name (in any case) that has topic
// among its arguments.
func isCommand(name, topic string) func(cmd []string) bool {
	return func(cmd []string) bool {
		if len(cmd) == 0 || !strings.EqualFold(cmd[0], name) {
			return false
		}
		for _, a := range cmd[1:] {
			if a == topic {
				return true
			}
		}
		return false
	}
}

// gateDeadline bounds a WaitJoined that must not return.
const gateDeadline = time.Second

// TestAnOlderSubscribeConfirmsNoNewerInterest: a channel joined, left and
// joined again while all three commands are on their way is confirmed by
// the answer to the last SUBSCRIBE, not the first: Redis runs the
// UNSUBSCRIBE in between, and an event published before the last
// SUBSCRIBE arrives reaches nobody. WaitJoined returned on the first
// answer, so a subscriber could be told it was subscribed while the node
// was not.
func TestAnOlderSubscribeConfirmsNoNewerInterest(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	g := newGate(t, srv.Addr)
	n := newNode(t, redis.NewClient(&redis.Options{Addr: g.addr()}), nil).start(t)
	n.waitHealthy(t)
	topic := n.topic("app-1", "x")
	sub, unsub := isCommand("subscribe", topic), isCommand("unsubscribe", topic)

	g.hold(sub)
	n.Join("app-1", "x")
	g.waitHeld(t, 1, sub)
	n.Leave("app-1", "x")
	g.waitHeld(t, 1, unsub)
	n.Join("app-1", "x")
	g.waitHeld(t, 2, sub)

	g.releaseThrough(unsub) // Redis subscribes and unsubscribes; the last SUBSCRIBE waits
	waitSubs(t, srv.Client(t), "app-1", "x", 0)
	ctx, cancel := context.WithTimeout(context.Background(), gateDeadline)
	defer cancel()
	require.ErrorIs(t, n.WaitJoined(ctx, "app-1", []string{"x"}), context.DeadlineExceeded,
		"confirmed by the answer to a SUBSCRIBE older than the UNSUBSCRIBE")

	g.open()
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, n.WaitJoined(ctx, "app-1", []string{"x"}))
	publish(t, New(srv.Client(t), Options{}), "app-1", Message{Channel: "x", Event: "e", Data: "after"})
	require.Equal(t, "after", n.waitFor(t, "app-1", "x", 1)[0].Data)
}
