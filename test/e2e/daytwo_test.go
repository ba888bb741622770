package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"

	"github.com/headcount/headcount/pkg/wsclient"
)

// Helpers of the day-two procedure tests (docs/OPERATIONS.md, "Day two"):
// a balancer standing in for a Kubernetes Service in front of wsnodes,
// clients that reconnect as pusher-js does and keep a record of every
// socket they held, and a poller that holds every count read through the
// HTTP API to what those records allow.

// balancer stands in for the wsnode Service: each new connection goes to
// the next of its endpoints, round-robin. An endpoint removed (a pod
// terminating or not ready) gets no new connection, and the connections
// it holds stay until either end closes them, as kube-proxy leaves
// established connections alone.
type balancer struct {
	ln        net.Listener
	mu        sync.Mutex
	endpoints []string
	next      int
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
	// head, if set, gets what each client sent first (its request head,
	// or its start), before it is forwarded; cut, if set, runs beside each
	// forwarded pair until ended closes, and may close them
	// (resume_test.go). Both are set with tap and read under mu.
	head func(b []byte)
	cut  func(client, server net.Conn, ended <-chan struct{})
}

// tap sets the balancer's head and cut hooks.
func (b *balancer) tap(head func(b []byte), cut func(client, server net.Conn, ended <-chan struct{})) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.head, b.cut = head, cut
}

func newBalancer(t testing.TB, endpoints ...string) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{ln: ln, endpoints: slices.Clone(endpoints), conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	t.Cleanup(b.close)
	return b
}

// Addr is the address clients connect to.
func (b *balancer) Addr() string { return b.ln.Addr().String() }

// add makes addr an endpoint (a new pod became ready).
func (b *balancer) add(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endpoints = append(b.endpoints, addr)
}

// remove takes addr out of the endpoints (a pod is terminating): its
// connections stay.
func (b *balancer) remove(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endpoints = slices.DeleteFunc(b.endpoints, func(e string) bool { return e == addr })
}

func (b *balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.endpoints) == 0 {
		return ""
	}
	b.next++
	return b.endpoints[b.next%len(b.endpoints)]
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Go(func() { b.forward(c) })
	}
}

// forward pipes c to an endpoint until either side closes.
func (b *balancer) forward(c net.Conn) {
	ep := b.pick()
	if ep == "" {
		_ = c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", ep, 2*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	b.mu.Lock()
	if b.conns == nil { // closed
		b.mu.Unlock()
		_, _ = c.Close(), s.Close()
		return
	}
	b.conns[c], b.conns[s] = struct{}{}, struct{}{}
	head, cut := b.head, b.cut
	b.mu.Unlock()
	if head != nil {
		buf := make([]byte, 1024)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(buf)
		_ = c.SetReadDeadline(time.Time{})
		head(buf[:n])
		_, _ = s.Write(buf[:n])
	}
	ended := make(chan struct{})
	defer close(ended)
	if cut != nil {
		b.wg.Go(func() { cut(c, s, ended) })
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	_, _ = c.Close(), s.Close()
	<-done
	b.mu.Lock()
	if b.conns != nil {
		delete(b.conns, c)
		delete(b.conns, s)
	}
	b.mu.Unlock()
}

func (b *balancer) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}

// fleet is a set of clients of one app that connect through addr,
// subscribe to channels, and, as pusher-js does, reconnect at once when
// the server closes their socket with 4200 (a drain). Any other ending of
// a socket, and any error frame, is a problem the test reports. Every
// socket is kept with the times that bound when the counts in Redis may
// include it.
type fleet struct {
	t        testing.TB
	addr     string
	key      string
	channels []string

	stopping atomic.Bool
	wg       sync.WaitGroup

	mu       sync.Mutex
	clients  int
	socks    []*fleetSock
	open     map[*wsclient.Conn]struct{}
	problems []string
}

// fleetSock is one socket a client held.
type fleetSock struct {
	client int
	// sent: when each subscribe was about to be sent; no count includes the
	// socket before.
	sent map[string]time.Time
	// ok: when each subscription_succeeded was read.
	ok map[string]time.Time
	// closed: when the server's close frame (code) was read, or the
	// connection was found cut; zero while open. The client answers the
	// close frame only after reading it, and the node uncounts the socket
	// only once answered.
	closed time.Time
	code   int
}

// startFleet starts n clients; they stop when the test ends.
func startFleet(t testing.TB, addr, key string, n int, channels ...string) *fleet {
	f := &fleet{t: t, addr: addr, key: key, channels: channels, open: map[*wsclient.Conn]struct{}{}}
	t.Cleanup(f.stop)
	f.grow(n)
	return f
}

// grow starts n more clients.
func (f *fleet) grow(n int) {
	f.mu.Lock()
	first := f.clients
	f.clients += n
	f.mu.Unlock()
	for i := first; i < first+n; i++ {
		f.wg.Go(func() { f.run(i) })
	}
}

func (f *fleet) run(i int) {
	for !f.stopping.Load() {
		if code := f.session(i); code/100 != 42 && !f.stopping.Load() {
			time.Sleep(time.Second) // pusher-js backs off unless told to reconnect
		}
	}
}

func (f *fleet) problem(format string, args ...any) {
	if f.stopping.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// session holds one socket until it ends and returns its close code (0 if
// it was cut or never opened).
func (f *fleet) session(i int) int {
	c, err := wsclient.Dial(f.addr, "/app/"+f.key+"?protocol=7&client=js&version=8.4.0&flash=false")
	if err != nil {
		f.problem("client %d: connect: %v", i, err)
		return 0
	}
	s := &fleetSock{client: i, sent: map[string]time.Time{}, ok: map[string]time.Time{}}
	f.mu.Lock()
	if f.stopping.Load() {
		f.mu.Unlock()
		_ = c.Close()
		return 0
	}
	f.socks = append(f.socks, s)
	f.open[c] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.open, c)
		f.mu.Unlock()
		_ = c.Close()
	}()
	for {
		msg, err := c.Read(0) // stop closes the connection
		now := time.Now()
		if err != nil {
			f.mu.Lock()
			s.closed = now
			f.mu.Unlock()
			f.problem("client %d: connection cut without a close frame: %v", i, err)
			return 0
		}
		if !strings.HasPrefix(msg, "{") { // a close frame: its code, then a reason
			code := 0
			if len(msg) >= 2 {
				code = int(msg[0])<<8 | int(msg[1])
			}
			f.mu.Lock()
			s.closed, s.code = now, code
			f.mu.Unlock()
			_, _ = c.Write(closeFrame(code)) // answered, as a browser does
			if code != 4200 {
				f.problem("client %d: closed with %d %q", i, code, msg[min(2, len(msg)):])
			}
			return code
		}
		var frame struct{ Event, Channel, Data string }
		if err := json.Unmarshal([]byte(msg), &frame); err != nil {
			f.problem("client %d: frame %q: %v", i, msg, err)
			continue
		}
		switch frame.Event {
		case "pusher:connection_established":
			for _, ch := range f.channels {
				f.mu.Lock()
				s.sent[ch] = time.Now()
				f.mu.Unlock()
				if err := c.Send(`{"event":"pusher:subscribe","data":{"channel":"` + ch + `"}}`); err != nil {
					f.problem("client %d: subscribe %s: %v", i, ch, err)
				}
			}
		case "pusher_internal:subscription_succeeded":
			f.mu.Lock()
			s.ok[frame.Channel] = now
			f.mu.Unlock()
		case "pusher:error", "pusher:subscription_error":
			f.problem("client %d: %s", i, msg)
		}
	}
}

// closeFrame is a client's masked close frame with code.
func closeFrame(code int) []byte {
	mask := [4]byte{1, 2, 3, 4}
	p := []byte{byte(code >> 8), byte(code)}
	return []byte{0x88, 0x80 | 2, mask[0], mask[1], mask[2], mask[3], p[0] ^ mask[0], p[1] ^ mask[1]}
}

// stop closes every socket and waits for the clients to end.
func (f *fleet) stop() {
	if f.stopping.Swap(true) {
		return
	}
	f.mu.Lock()
	for c := range f.open {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// bounds are how many of the fleet's sockets a count of ch read between
// from and to may hold: at least those subscribed lag before it began and
// not closed before it ended, at most those whose subscribe was sent
// before it ended and that were not closed lag before it began. lag bounds
// how long a node takes to get a change into Redis (it gathers changes for
// 5 ms before a flush).
func (f *fleet) bounds(ch string, from, to time.Time, lag time.Duration) (lo, hi int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.socks {
		if ok, seen := s.ok[ch]; seen && !ok.After(from.Add(-lag)) && (s.closed.IsZero() || !s.closed.Before(to)) {
			lo++
		}
		if sent, seen := s.sent[ch]; seen && !sent.After(to) && (s.closed.IsZero() || !s.closed.Before(from.Add(-lag))) {
			hi++
		}
	}
	return lo, hi
}

// subscribed reports whether every client holds an open socket subscribed
// to every channel.
func (f *fleet) subscribed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	held := map[int]bool{}
	for _, s := range f.socks {
		if s.closed.IsZero() && len(s.ok) == len(f.channels) {
			held[s.client] = true
		}
	}
	return len(held) == f.clients
}

// waitSubscribed waits until subscribed.
func (f *fleet) waitSubscribed(t *testing.T, within time.Duration, what string) {
	t.Helper()
	waitFor(t, within, what, f.subscribed)
}

// closes returns the times of the closes with code read from since on.
func (f *fleet) closes(code int, since time.Time) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, s := range f.socks {
		if s.code == code && !s.closed.Before(since) {
			out = append(out, s.closed)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// sockets is how many sockets the clients have opened so far.
func (f *fleet) sockets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.socks)
}

// requireNoProblems fails t with every problem a client met.
func (f *fleet) requireNoProblems(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.problems) > 0 {
		t.Fatalf("%d client problems:\n%s", len(f.problems), strings.Join(f.problems, "\n"))
	}
}

// countPoller reads the counts of channels through the HTTP API, one read
// every 20 ms in turn, and checks each against the fleet's bounds for the
// time the read took.
type countPoller struct {
	client   *pusher.Client
	fleet    *fleet
	channels []string
	lag      time.Duration

	stopc chan struct{}
	done  chan struct{}

	polls      int
	widest     int // largest hi - lo met
	violations []string
}

func startPoller(t testing.TB, client *pusher.Client, f *fleet, lag time.Duration, channels ...string) *countPoller {
	p := &countPoller{client: client, fleet: f, channels: channels, lag: lag, stopc: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	t.Cleanup(p.stop)
	return p
}

func (p *countPoller) run() {
	defer close(p.done)
	info := "subscription_count"
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
		ch := p.channels[i%len(p.channels)]
		from := time.Now()
		got, err := p.client.Channel(ch, pusher.ChannelParams{Info: &info})
		to := time.Now()
		if err != nil {
			p.violations = append(p.violations, fmt.Sprintf("%s read of %s failed: %v", from.Format("15:04:05.000"), ch, err))
			continue
		}
		lo, hi := p.fleet.bounds(ch, from, to, p.lag)
		p.polls++
		p.widest = max(p.widest, hi-lo)
		if n := got.SubscriptionCount; n < lo || n > hi {
			p.violations = append(p.violations, fmt.Sprintf("%s %s: count %d read in %v, want %d..%d",
				from.Format("15:04:05.000"), ch, n, to.Sub(from).Round(time.Millisecond), lo, hi))
		}
	}
}

func (p *countPoller) stop() {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
}

// requireExact stops the poller and fails t unless it read at least
// minPolls counts and every one was within its bounds.
func (p *countPoller) requireExact(t testing.TB, minPolls int) {
	t.Helper()
	p.stop()
	t.Logf("%d count reads, every one checked; widest bounds %d", p.polls, p.widest)
	if len(p.violations) > 0 {
		t.Fatalf("%d of %d count reads out of bounds:\n%s", len(p.violations), p.polls, strings.Join(p.violations, "\n"))
	}
	if p.polls < minPolls {
		t.Fatalf("only %d count reads, want at least %d", p.polls, minPolls)
	}
}
