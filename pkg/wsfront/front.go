package wsfront

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/headcount/headcount/pkg/portcap"
)

// Front serves a WebSocket port without net/http's server: it accepts
// connections, reads each request head into a pooled buffer, and hands an
// upgrade of a WebSocket path (ParsePath) to the handler with a minimal
// http.Request and a ResponseWriter whose Hijack hands over the
// connection (Options.Hijack). Anything else is answered with a short HTTP error and the connection is
// closed: the port serves nothing but WebSockets.
//
// Why: in a connection storm net/http's server took about a third of a
// node's CPU per new socket on what an upgrade does not use (a context and
// response per connection, 12 KiB of buffers left to the GC at the hijack,
// its routing, the remote address as a string, stack growth in its deep
// serve loop): BenchmarkLoad/storm in test/e2e.
//
// A client has 10 s to send its request head, enforced by one sweep over
// the connections still reading theirs instead of a timer each.
//
// At most Options.MaxConns connections are open on the port at once,
// handshaking or upgraded: the process's file descriptors must outlast any
// one client, or it can no longer reach its backends or answer its health
// checks. The accept loop answers a connection past the cap with
// portcap's 503 and closes it.
type Front struct {
	rules
	ln      net.Listener
	handler http.HandlerFunc
	hijack  HijackFunc

	// reading holds the connections reading their head -> start (unix
	// ms); guarded by mu.
	reading map[net.Conn]int64
	active  sync.WaitGroup // handshakes in progress
}

// rules are what both fronts hold: the port's policy (its cap, refusal
// and accept backoff), the routes, the head timeout and the shutdown flag.
type rules struct {
	port     *portcap.Port
	up       func() bool // Options.Up
	log      hclog.Logger
	onRefuse func(Reason) // counts a refused connection or request, or a failed accept

	// headTimeout is how long a client has to send its request head,
	// checked every sweepEvery (tests shorten both before Serve).
	headTimeout, sweepEvery time.Duration

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by shutdown
}

// Options configure a Front. Handler is required.
type Options struct {
	// Handler serves the requests for a path ParsePath accepts; it
	// upgrades them with websocket.Accept or answers with an HTTP error.
	Handler http.HandlerFunc
	// Hijack builds what an upgrade hands over; nil: the 101 is sent at
	// the hijack and the connection is handed over as it is.
	Hijack HijackFunc
	// MaxConns caps the connections open on the port, handshaking or
	// upgraded (0: no cap).
	MaxConns int
	// Logger gets the accept loop's warnings and refusals (debug); nil:
	// none.
	Logger hclog.Logger
	// OnRefuse is called for each connection or request refused and each
	// failed accept, with the reason; nil: not counted.
	OnRefuse func(Reason)
	// Up, if set, answers GET and HEAD /up on the port, for load balancers
	// that check the port they send to: 200 while it returns true, else
	// 503. Neither answer is a refusal for OnRefuse. Nil: /up is a 404.
	Up func() bool
}

// HijackFunc builds the connection and buffers an upgrade's Hijack returns
// from the accepted connection c, early (what the client sent behind its
// request head, to be read before c) and response (the 101 Switching
// Protocols, not sent yet, to be sent before anything else). It lets the
// owner of the upgraded socket choose its buffers and when the 101 leaves:
// with the first frame, say, in one write.
type HijackFunc func(c *Conn, early, response []byte) (net.Conn, *bufio.ReadWriter)

const (
	// maxHead bounds a request head; browsers send well under 2 KiB to a
	// WebSocket endpoint, cookies included.
	maxHead = 16 << 10
	// headBufferSize is the pooled buffer a head is read into; a larger
	// head grows a private copy up to maxHead.
	headBufferSize = 2 << 10
)

var headPool = sync.Pool{New: func() any { b := make([]byte, headBufferSize); return &b }}

// Listen binds addr (TCP) for a Front; Serve serves it.
func Listen(addr string, opts Options) (*Front, error) {
	if opts.Handler == nil {
		return nil, errors.New("wsfront: no handler")
	}
	// No TCP keepalive: the handler's owner closes sockets that stay
	// silent (pusher-js pings every 120 s), and the kernel's probes would
	// cost four setsockopt(2) calls per accepted socket.
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return newFront(ln, opts), nil
}

// newFront is a Front on ln with opts (checked).
func newFront(ln net.Listener, opts Options) *Front {
	f := &Front{ln: ln, handler: opts.Handler, hijack: opts.Hijack, reading: map[net.Conn]int64{}}
	f.init(opts)
	if f.hijack == nil {
		f.hijack = plainHijack
	}
	return f
}

// init sets the rules from opts.
func (f *rules) init(opts Options) {
	f.up, f.log, f.onRefuse = opts.Up, opts.Logger, opts.OnRefuse
	// 10 s is net/http's ReadHeaderTimeout in the server this replaced.
	f.headTimeout, f.sweepEvery, f.done = 10*time.Second, time.Second, make(chan struct{})
	if f.log == nil {
		f.log = hclog.NewNullLogger()
	}
	if f.onRefuse == nil {
		f.onRefuse = func(Reason) {}
	}
	f.port = portcap.New(portcap.Config{Max: opts.MaxConns, Setting: "--max-sockets",
		Refusing: "refusing connections: the WebSocket port is at its socket cap (--max-sockets)",
		Logger:   f.log, OnEvent: func(e portcap.Event) {
			if e == portcap.AcceptFailed {
				f.onRefuse(AcceptFailed)
			} else {
				f.onRefuse(AtCap)
			}
		}})
}

// Open is the number of connections open on the port, handshaking or
// upgraded: what MaxConns caps.
func (f *Front) Open() int { return int(f.port.Open()) }

// MaxConns is the cap on connections open on the port (0: none).
func (f *rules) MaxConns() int { return int(f.port.Max()) }

// Addr is the bound address.
func (f *Front) Addr() string { return f.ln.Addr().String() }

// Serve accepts until shutdown, then returns nil. Accept failures (such as
// running out of file descriptors) are retried with backoff
// (portcap.Port.Accept): a node that stopped accepting while it looks
// healthy is the worst case.
func (f *Front) Serve() error {
	go f.sweep()
	for {
		c, err := f.port.Accept(f.ln)
		if err != nil {
			return nil // shut down
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = c.Close()
			return nil
		}
		if f.port.Full(f.port.Open()) {
			f.mu.Unlock()
			f.port.Refuse(c)
			continue
		}
		f.active.Add(1)
		fc := f.port.Admit(c, nil)
		f.reading[fc] = time.Now().UnixMilli()
		f.mu.Unlock()
		go f.handshake(fc)
	}
}

// Conn is an accepted connection, counted against the socket cap until it
// is first closed. The connection an upgrade hijacks wraps this one, so
// however a socket ends, its close gives its place back.
type Conn = portcap.Conn

func (f *rules) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// sweep closes connections that did not send their request head in time.
func (f *Front) sweep() {
	f.sweepLate(func(limit int64) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for c, start := range f.reading {
			if start < limit {
				_ = c.Close()
				delete(f.reading, c)
			}
		}
	})
}

// sweepLate calls closeLate every sweepEvery until shutdown with the
// time (unix ms) before which a connection still sending its head
// started too long ago: the one sweep behind the head timeout, with no
// timer per connection.
func (f *rules) sweepLate(closeLate func(limit int64)) {
	t := time.NewTicker(f.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return
		case now := <-t.C:
			closeLate(now.Add(-f.headTimeout).UnixMilli())
		}
	}
}

// Shutdown stops accepting, closes connections still reading their head
// and the refusals still lingering, and waits up to timeout for handshakes
// past that. Upgraded sockets are not touched.
func (f *Front) Shutdown(timeout time.Duration) {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.done)
		_ = f.ln.Close()
		for c := range f.reading {
			_ = c.Close()
		}
	}
	f.mu.Unlock()
	f.port.Close()
	waited := make(chan struct{})
	go func() { f.active.Wait(); f.port.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(timeout):
		f.log.Warn("handshakes still in progress at shutdown", "waited", timeout)
	}
}

// handshake reads c's request head and serves it. The handler may go on
// serving the upgraded socket: the handshake counts as done for Shutdown
// once the connection is hijacked.
func (f *Front) handshake(c net.Conn) {
	w := &upgradeWriter{c: c, hijacked: f.active.Done, hijack: f.hijack}
	r, status, err := f.readRequest(c, w)
	// A load balancer's check: its 503 says "not ready", not "refused".
	probe := r != nil && r.URL.Path == upPath
	switch {
	case probe:
		f.serveUp(w, r)
	case r != nil:
		f.handler(w, r)
	case status != 0:
		http.Error(w, err.Error(), status)
	default:
		_ = c.Close() // the client went away or was too slow: nothing to answer
	}
	if w.hijacked != nil {
		f.reportRefusal(w, probe, c.RemoteAddr())
		if r != nil || status != 0 {
			w.finish()
		}
		f.active.Done()
	}
}

// reportRefusal counts and logs the answer in w if it refuses the request
// (a load balancer's check answered 503 does not). remote may be nil: an
// evloop.Conn has no address once closed (the client went away while its
// upgrade was handled).
func (f *rules) reportRefusal(w *upgradeWriter, probe bool, remote net.Addr) {
	if w.status >= 400 && (!probe || w.status != http.StatusServiceUnavailable) {
		if !w.counted {
			f.onRefuse(Refused)
		}
		addr := "gone"
		if remote != nil {
			addr = remote.String()
		}
		f.log.Debug("refused a request", "status", w.status, "remote_addr", addr,
			"error", strings.TrimSpace(string(w.body)))
	}
}

// readRequest reads and parses c's request head into a pooled buffer,
// which it returns to the pool: what outlives it is copied (the request's
// strings, and into w what the client sent behind the head). It returns
// the request for a WebSocket path (ParsePath), or the status to refuse
// it with, or neither when there is nobody to answer.
func (f *Front) readRequest(c net.Conn, w *upgradeWriter) (*http.Request, int, error) {
	bp := headPool.Get().(*[]byte)
	defer headPool.Put(bp)
	head, early, err := readHead(c, *bp)
	f.mu.Lock()
	_, inTime := f.reading[c] // else swept: closed already
	delete(f.reading, c)
	f.mu.Unlock()
	switch {
	case errors.Is(err, errHeadTooLarge):
		return nil, http.StatusRequestHeaderFieldsTooLarge, fmt.Errorf("request head over %d bytes", maxHead)
	case err != nil || !inTime:
		return nil, 0, nil
	}
	r, status, err := f.route(head)
	if r != nil {
		w.early = bytes.Clone(early)
	}
	return r, status, err
}

// route parses a whole request head: the request for a path ParsePath
// accepts or /up, or the status to refuse it with.
func (f *rules) route(head []byte) (*http.Request, int, error) {
	r, err := parseRequest(head)
	switch {
	case errors.Is(err, errHTTPVersion):
		return nil, http.StatusHTTPVersionNotSupported, err
	case err != nil:
		return nil, http.StatusBadRequest, err
	}
	if r.URL.Path == upPath && f.up != nil {
		return r, 0, nil
	}
	if _, _, err := ParsePath(r.URL.Path); err != nil {
		return nil, http.StatusNotFound, err
	}
	return r, 0, nil
}

var errHeadTooLarge = errors.New("request head too large")

// upPath is where Options.Up answers; no path ParsePath accepts can be it.
const upPath = "/up"

// serveUp answers a load balancer's check of the port.
func (f *rules) serveUp(w *upgradeWriter, r *http.Request) {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed: /up answers GET and HEAD", http.StatusMethodNotAllowed)
		return
	case f.up():
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok\n")
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready\n")
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		w.body = nil
	}
}

// readHead reads from c until the end of an HTTP request head (a blank
// line), into buf and, past its size, a growing copy. It returns the head
// and what was read past it.
func readHead(c net.Conn, buf []byte) (head, rest []byte, err error) {
	n := 0
	for {
		if n == len(buf) {
			if n >= maxHead {
				return nil, nil, errHeadTooLarge
			}
			buf = append(buf[:n], make([]byte, min(n, maxHead-n))...)
		}
		m, err := c.Read(buf[n:])
		from := max(0, n-3)
		n += m
		if i := headEnd(buf[from:n]); i >= 0 {
			return buf[:from+i], buf[from+i : n], nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
}

// headEnd is the index just past the blank line ending a head in b
// ("\n\n" or "\n\r\n": bare line feeds are tolerated as net/http does), or -1.
func headEnd(b []byte) int {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return -1
		}
		i += 1 + j
	}
	return -1
}

// parseRequest parses a request head, keeping the headers a WebSocket
// upgrade reads. It refuses what net/http's server refuses (a method that is
// not a token, control bytes in the target, a version other than HTTP/1.x,
// header names that are not tokens, control bytes in header values, a
// missing, repeated or malformed Host) and, stricter, folded header lines,
// an empty Host on HTTP/1.1, targets not starting with "/" and any request
// with a body. FuzzFrontHead checks that net/http's server accepts whatever
// it accepts.
func parseRequest(head []byte) (*http.Request, error) {
	line, head := cutLine(head)
	method, rest, ok1 := strings.Cut(string(line), " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || !strings.HasPrefix(target, "/") {
		return nil, fmt.Errorf("malformed request line %q", portcap.Clip(string(line)))
	}
	if !isToken(method) {
		return nil, fmt.Errorf("invalid method %q", portcap.Clip(method))
	}
	for i := range len(target) {
		if c := target[i]; c < ' ' || c == 0x7f {
			return nil, fmt.Errorf("control byte in the request target %q", portcap.Clip(target))
		}
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok {
		return nil, fmt.Errorf("malformed HTTP version %q", portcap.Clip(proto))
	}
	if major != 1 {
		return nil, fmt.Errorf("%w: %q (this port speaks HTTP/1.1)", errHTTPVersion, proto)
	}
	path, query, _ := strings.Cut(target, "?")
	if strings.Contains(path, "%") {
		p, err := url.PathUnescape(path)
		if err != nil {
			return nil, fmt.Errorf("malformed path %q", portcap.Clip(path))
		}
		path = p
	}
	r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, RequestURI: target,
		Proto: proto, ProtoMajor: major, ProtoMinor: minor, Header: make(http.Header, 4)}
	hosts := 0
	for len(head) > 0 {
		line, head = cutLine(head)
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, errors.New("folded header lines are not supported")
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, fmt.Errorf("malformed header line %q", portcap.Clip(string(line)))
		}
		if !isToken(name) {
			return nil, fmt.Errorf("invalid header name %q", portcap.Clip(string(name)))
		}
		if !validValue(value) {
			return nil, fmt.Errorf("invalid header value in %q: control bytes are not allowed", portcap.Clip(string(name)))
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			hosts++
			r.Host = string(value)
		case bytes.EqualFold(name, []byte("Content-Length")):
			if string(value) != "0" {
				return nil, errors.New("a WebSocket handshake has no body")
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return nil, errors.New("a WebSocket handshake has no body")
		default:
			for _, k := range upgradeHeaders {
				if bytes.EqualFold(name, []byte(k)) {
					r.Header[k] = append(r.Header[k], string(value))
					break
				}
			}
		}
	}
	switch {
	case hosts > 1 || hosts == 0 && r.ProtoAtLeast(1, 1):
		return nil, errors.New("an HTTP/1.1 request needs exactly one Host header")
	case r.Host == "" && r.ProtoAtLeast(1, 1):
		return nil, errors.New("empty Host header")
	case !validHost(r.Host):
		return nil, fmt.Errorf("malformed Host header %q", portcap.Clip(r.Host))
	}
	return r, nil
}

// errHTTPVersion refuses a request whose version is not HTTP/1.x, with 505
// as net/http's server does.
var errHTTPVersion = errors.New("unsupported HTTP version")

// tokenBytes and hostBytes are the bytes of an RFC 7230 token and of a Host
// header as net/http's server allows them (httpguts.ValidHeaderFieldName,
// ValidHostHeader).
var tokenBytes, hostBytes = byteSet("!#$%&'*+-.^_`|~" + alnum), byteSet("!$%&'()*+,-.:;=[]_~" + alnum)

const alnum = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func byteSet(s string) *[256]bool {
	var set [256]bool
	for i := range len(s) {
		set[s[i]] = true
	}
	return &set
}

func isToken[T string | []byte](s T) bool {
	for i := range len(s) {
		if !tokenBytes[s[i]] {
			return false
		}
	}
	return len(s) > 0
}

// validValue reports whether a header value has no control bytes other
// than tab (httpguts.ValidHeaderFieldValue); bytes past ASCII are allowed.
func validValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func validHost(h string) bool {
	for i := range len(h) {
		if !hostBytes[h[i]] {
			return false
		}
	}
	return true
}

// upgradeHeaders are the request headers websocket.Accept reads, in
// canonical form (it looks them up with Header.Get), and Origin, which the
// handler checks against the app's allowed origins. With compression off,
// no subprotocols and the origin left to the handler, Accept reads no
// other.
var upgradeHeaders = []string{"Connection", "Upgrade", "Sec-Websocket-Key", "Sec-Websocket-Version", "Origin"}

func cutLine(b []byte) (line, rest []byte) {
	line, rest, _ = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest
}

// upgradeWriter is the http.ResponseWriter a handler gets from Front.
// An upgrade's 101 is not sent on its own: Hijack gives it to the
// HijackFunc, which may send it with the first frame (one write(2) fewer
// per socket, and one read fewer for the client). Any other response is
// collected and sent by finish, which closes the connection.
type upgradeWriter struct {
	c      net.Conn
	early  []byte // what the client sent behind its request head
	header http.Header
	status int
	body   []byte
	// hijacked is called by Hijack, then set to nil.
	hijacked func()
	hijack   HijackFunc
	// conn is the upgraded socket's connection (set by Hijack).
	conn net.Conn
	// counted is set by Counted: the handler counted its refusal itself.
	counted bool
}

func (w *upgradeWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 4)
	}
	return w.header
}

func (w *upgradeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *upgradeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, b...)
	return len(b), nil
}

// Hijack hands over the connection as the HijackFunc builds it, with what
// the client sent behind its head and the 101 not sent yet.
func (w *upgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked == nil || w.status != http.StatusSwitchingProtocols {
		return nil, nil, errors.New("hijack without a 101 response")
	}
	w.hijacked()
	w.hijacked = nil
	fc, ok := w.c.(*Conn)
	if !ok {
		return nil, nil, errors.New("hijack of a connection the front did not accept")
	}
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = w.header.Write(&head)
	head.WriteString("\r\n")
	conn, brw := w.hijack(fc, w.early, head.Bytes())
	w.conn, w.early = conn, nil
	return conn, brw, nil
}

// Counted tells the front that its handler counted the refusal it is
// answering w with under a reason of its own, so OnRefuse does not count
// it again as Refused. It does nothing for another ResponseWriter.
func Counted(w http.ResponseWriter) {
	if uw, ok := w.(*upgradeWriter); ok {
		uw.counted = true
	}
}

// Upgraded is the connection the upgrade w (a Front's ResponseWriter)
// handed over, as the HijackFunc built it, or nil if w did not upgrade.
func Upgraded(w http.ResponseWriter) net.Conn {
	if uw, ok := w.(*upgradeWriter); ok {
		return uw.conn
	}
	return nil
}

// plainHijack is the HijackFunc without Options.Hijack: it sends the 101
// at once and reads early before c.
func plainHijack(c *Conn, early, response []byte) (net.Conn, *bufio.ReadWriter) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(response) // a failure shows in the next read or write
	_ = c.SetWriteDeadline(time.Time{})
	conn := net.Conn(c)
	if len(early) > 0 {
		conn = &earlyConn{Conn: c, early: early}
	}
	return conn, bufio.NewReadWriter(bufio.NewReader(conn), bufio.NewWriter(conn))
}

// earlyConn reads what a client sent behind its request head before
// reading the connection.
type earlyConn struct {
	*Conn
	early []byte
}

func (c *earlyConn) Read(p []byte) (int, error) {
	if len(c.early) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.early)
	c.early = c.early[n:]
	return n, nil
}

// finish sends a response that is not an upgrade and closes the
// connection so that the client gets to read it (portcap.LingerClose).
func (w *upgradeWriter) finish() {
	_ = w.c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := w.c.Write(w.response()); err != nil {
		_ = w.c.Close()
		return
	}
	portcap.LingerClose(w.c)
}

// response is the whole response collected in w, which ends the
// connection.
func (w *upgradeWriter) response() []byte {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", w.status, http.StatusText(w.status))
	w.Header().Set("Content-Length", strconv.Itoa(len(w.body)))
	w.Header().Set("Connection", "close")
	_ = w.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body)
	return b.Bytes()
}
