package wsnode_test

// The differential test between the node's transports: the same client
// byte stream goes to a node on each transport (--transport), and what
// comes back, parsed and normalised, must be the same. The goroutine
// transport (coder/websocket) is the oracle.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/wsnode"
)

const (
	// diffReadLimit is the node's limit on one client message
	// (tunables.readLimit).
	diffReadLimit = 16 << 10
	// quietPeriod: once a stream is written, a server that sends nothing
	// for this long and keeps the connection open has nothing more to
	// say. Only streams that leave the connection open wait it out.
	quietPeriod = 300 * time.Millisecond
	// closeLinger is how long the harness waits, after its close frame,
	// for the server to end the connection before it sends a FIN itself.
	closeLinger = time.Second
	// runDeadline bounds one stream's run in all; a run that reaches it
	// ends in "timeout", which fails the comparison unless both do.
	runDeadline = 8 * time.Second
	// diffWSKey is the Sec-WebSocket-Key of every handshake (RFC 6455's
	// own example), so Sec-WebSocket-Accept is the same in every run.
	diffWSKey   = "dGhlIHNhbXBsZSBub25jZQ=="
	diffOrigKey = "key-origin" // an app that allows https://good.example only
	diffOffKey  = "key-off"
)

// diffApps is the apps of both nodes.
func diffApps(t testing.TB) *apps.Registry {
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: secret, Enabled: true, EnableClientMessages: true},
		{ID: "app-off", Key: diffOffKey, Secret: secret, Enabled: false},
		{ID: "app-origin", Key: diffOrigKey, Secret: secret, Enabled: true, AllowedOrigins: []string{"https://good.example"}},
	})
	require.NoError(t, err)
	return reg
}

// startTransport runs a node on transport against srv, in a Redis key
// space of its own (so two nodes on one server share no channel), and
// returns its WebSocket address once it is ready.
func startTransport(tb testing.TB, srv *redistest.Server, transport string, log hclog.Logger, tune ...func(*wsnode.App)) string {
	tb.Helper()
	cfg := config.WSNode{
		Common: config.Common{
			Redis: srv.URL(), RedisPrefix: "diff-" + transport + "-" + strconv.Itoa(rand.IntN(1e9)), AdminAddr: "127.0.0.1:0",
			LogLevel: "debug", LogFormat: "text", Apps: diffApps(tb),
		},
		Addr:   "127.0.0.1:0",
		NodeID: "node-diff-" + transport,
		// A slow heartbeat keeps the node's own activity, which the fuzzer
		// would take for coverage of its inputs, rare.
		Heartbeat: time.Second,
		Drain:     200 * time.Millisecond,
		Transport: transport,
	}
	a, err := wsnode.New(wsnode.Options{Config: cfg, Logger: log, Registry: prometheus.NewRegistry()})
	require.NoError(tb, err)
	for _, f := range tune {
		f(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(tb, err, "Run")
		case <-time.After(30 * time.Second):
			tb.Error("Run did not return after cancel")
		}
	})
	require.Eventually(tb, func() bool {
		resp, err := http.Get("http://" + a.AdminAddr() + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, wait, tick, "node never became ready")
	return a.Addr()
}

// diffTargets starts the oracle (goroutine) and the event loop node on one
// redis-server and returns their addresses.
func diffTargets(tb testing.TB, log func(testing.TB) hclog.Logger) (oracle, subject string) {
	if runtime.GOOS != "linux" {
		tb.Skip("the event loop transport needs Linux")
	}
	srv := redistest.New(tb)
	return startTransport(tb, srv, config.TransportGoroutine, log(tb)),
		startTransport(tb, srv, config.TransportEventLoop, log(tb))
}

// ---- streams

// clientStream is what one client sends on one TCP connection.
type clientStream struct {
	head  []byte // the HTTP request, written first, in one write
	steps []step
	// halfClose ends the stream with a FIN (shutdown(SHUT_WR)); the
	// harness reads on.
	halfClose bool
}

// step is bytes to send, in writes as split says, optionally after a
// condition on what the server sent.
type step struct {
	data []byte
	// build makes the bytes from the session (the socket id, for auth);
	// the step waits for pusher:connection_established first.
	build func(*session) []byte
	// await waits, before sending, for the next server text frame that
	// contains await (the n-th step awaiting a string waits for its n-th
	// frame); awaitClose for the server's close frame.
	await      string
	awaitClose bool
	// sync, after the data, sends a frame the server answers in turn
	// (syncFrame) and waits for the answer, a close frame or the end: so
	// every reply to the data is out before the next step, whatever the
	// server does with replies queued when it closes or meets EOF.
	sync  bool
	split splitter
	// pause is slept between two writes of the step: the stream's
	// timing, not a wait for a condition.
	pause time.Duration
}

// splitter cuts n bytes into the sizes of successive writes; nil is one
// write.
type splitter func(n int) []int

func bytewise(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// randomSplit cuts into writes of 1 to max bytes, the same for one seed
// and length.
func randomSplit(seed uint64, maxWrite int) splitter {
	return func(n int) []int {
		r := rand.New(rand.NewPCG(seed, uint64(n)))
		var s []int
		for n > 0 {
			k := min(n, 1+r.IntN(maxWrite))
			s = append(s, k)
			n -= k
		}
		return s
	}
}

// session is what a stream's built steps know of their connection.
type session struct {
	socketID string
	// derived are strings computed from the socket id (signatures); the
	// transcript names them, should the server ever echo one.
	derived []string
}

// sign signs msg for app-1 and remembers the signature.
func (s *session) sign(msg string) string {
	v := sign(msg)
	s.derived = append(s.derived, v)
	return v
}

// ---- the client's frames

// wsFrame is one client frame, as valid or as broken as a case needs.
type wsFrame struct {
	op      byte
	fin     bool
	rsv     byte // the three RSV bits, as they sit in the first byte (0x70)
	payload []byte
	mask    *[4]byte // nil: unmasked
	// length, when set, is written as the payload length instead of
	// len(payload) (an oversize header without its payload).
	length uint64
}

func (f wsFrame) bytes() []byte {
	b0 := f.op&0x0f | f.rsv&0x70
	if f.fin {
		b0 |= 0x80
	}
	n := uint64(len(f.payload))
	if f.length != 0 {
		n = f.length
	}
	var maskBit byte
	if f.mask != nil {
		maskBit = 0x80
	}
	b := []byte{b0}
	switch {
	case n < 126:
		b = append(b, maskBit|byte(n))
	case n <= 0xffff:
		b = append(b, maskBit|126, byte(n>>8), byte(n))
	default:
		b = append(b, maskBit|127)
		b = binary.BigEndian.AppendUint64(b, n)
	}
	if f.mask == nil {
		return append(b, f.payload...)
	}
	b = append(b, f.mask[:]...)
	for i, c := range f.payload {
		b = append(b, c^f.mask[i%4])
	}
	return b
}

const (
	opCont   = 0x0
	opText   = 0x1
	opBinary = 0x2
	opClose  = 0x8
	opPing   = 0x9
	opPong   = 0xa
)

// masker hands out masking keys: random ones from a seed, or always zero.
type masker struct {
	r    *rand.Rand
	zero bool
}

func newMasker(seed uint64, zero bool) *masker {
	return &masker{r: rand.New(rand.NewPCG(seed, 29)), zero: zero}
}

func (m *masker) key() *[4]byte {
	var k [4]byte
	if !m.zero {
		binary.LittleEndian.PutUint32(k[:], m.r.Uint32())
	}
	return &k
}

func (m *masker) text(s string) []byte {
	return wsFrame{op: opText, fin: true, payload: []byte(s), mask: m.key()}.bytes()
}

func (m *masker) frame(op byte, fin bool, payload []byte) []byte {
	return wsFrame{op: op, fin: fin, payload: payload, mask: m.key()}.bytes()
}

// fragments sends payload as a message of op in n frames (n-1
// continuations), with extra (control frames) after the first fragment.
func (m *masker) fragments(op byte, payload []byte, n int, extra ...[]byte) []byte {
	var b []byte
	per := (len(payload) + n - 1) / n
	for i := range n {
		lo, hi := min(i*per, len(payload)), min((i+1)*per, len(payload))
		o := byte(opCont)
		if i == 0 {
			o = op
		}
		b = append(b, m.frame(o, i == n-1, payload[lo:hi])...)
		if i == 0 {
			for _, e := range extra {
				b = append(b, e...)
			}
		}
	}
	return b
}

func closePayload(code uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}

// upgrade is a WebSocket handshake request for path with the usual
// headers, less those named in drop, plus extra lines.
func upgrade(method, path string, drop []string, extra ...string) []byte {
	lines := []string{
		"Host: 127.0.0.1",
		"Upgrade: websocket",
		"Connection: Upgrade",
		"Sec-WebSocket-Key: " + diffWSKey,
		"Sec-WebSocket-Version: 13",
	}
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\n")
	for _, l := range lines {
		name, _, _ := strings.Cut(l, ":")
		skip := false
		for _, d := range drop {
			skip = skip || strings.EqualFold(d, name)
		}
		if !skip {
			b.WriteString(l + "\r\n")
		}
	}
	for _, l := range extra {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// pusherHead is pusher-js's handshake for app-1.
func pusherHead() []byte {
	return upgrade("GET", "/app/"+appKey+pusherJSQuery, nil, "Origin: https://good.example", "User-Agent: pusher-js-test")
}

// ---- running a stream

// serverOutput is the server's bytes, parsed as far as they go.
type serverOutput struct {
	headDone bool
	status   string
	header   http.Header
	frames   []serverFrame
	trailing int // bytes after the last whole frame
}

type serverFrame struct {
	op      byte
	fin     bool
	rsv     byte
	masked  bool
	payload []byte
}

func parseOutput(b []byte) serverOutput {
	var o serverOutput
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		o.trailing = len(b)
		return o
	}
	o.headDone = true
	lines := strings.Split(string(b[:end]), "\r\n")
	o.status = lines[0]
	o.header = http.Header{}
	for _, l := range lines[1:] {
		if k, v, ok := strings.Cut(l, ":"); ok {
			o.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	b = b[end+4:]
	if !strings.Contains(o.status, " 101 ") {
		return o // the rest is an HTTP body, not compared
	}
	for {
		f, n, ok := parseFrame(b)
		if !ok {
			o.trailing = len(b)
			return o
		}
		o.frames = append(o.frames, f)
		b = b[n:]
	}
}

// parseFrame parses one frame at the start of b; ok is false when b holds
// less than one whole frame.
func parseFrame(b []byte) (f serverFrame, n int, ok bool) {
	if len(b) < 2 {
		return f, 0, false
	}
	f.fin, f.rsv, f.op, f.masked = b[0]&0x80 != 0, b[0]&0x70, b[0]&0x0f, b[1]&0x80 != 0
	size, n := uint64(b[1]&0x7f), 2
	switch size {
	case 126:
		if len(b) < 4 {
			return f, 0, false
		}
		size, n = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return f, 0, false
		}
		size, n = binary.BigEndian.Uint64(b[2:]), 10
	}
	var key []byte
	if f.masked {
		if len(b) < n+4 {
			return f, 0, false
		}
		key, n = b[n:n+4], n+4
	}
	if uint64(len(b)-n) < size {
		return f, 0, false
	}
	f.payload = bytes.Clone(b[n : n+int(size)])
	for i := range f.payload {
		if key != nil {
			f.payload[i] ^= key[i%4]
		}
	}
	return f, n + int(size), true
}

// connReader reads the server's bytes on a goroutine of its own.
type connReader struct {
	mu   sync.Mutex
	buf  []byte
	err  error         // how the read ended; nil while it goes on
	wake chan struct{} // a token after every read
	done chan struct{}
}

func newConnReader(c net.Conn) *connReader {
	r := &connReader{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		p := make([]byte, 32<<10)
		for {
			n, err := c.Read(p)
			r.mu.Lock()
			r.buf = append(r.buf, p[:n]...)
			if err != nil {
				r.err = err
			}
			r.mu.Unlock()
			select {
			case r.wake <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *connReader) state() (serverOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return parseOutput(r.buf), r.err
}

// waitFor waits until cond holds of the output, the read ends, or the
// deadline passes; it reports whether cond held.
func (r *connReader) waitFor(deadline time.Time, cond func(serverOutput) bool) bool {
	for {
		o, err := r.state()
		if cond(o) {
			return true
		}
		if err != nil {
			return false
		}
		timer := time.NewTimer(time.Until(deadline))
		select {
		case <-r.wake:
			timer.Stop()
		case <-timer.C:
			return false
		}
	}
}

// socketIDOf is the socket id of the output's connection_established.
func socketIDOf(o serverOutput) string {
	for _, f := range o.frames {
		var m struct{ Event, Data string }
		if f.op == opText && json.Unmarshal(f.payload, &m) == nil && m.Event == "pusher:connection_established" {
			var d struct {
				SocketID string `json:"socket_id"`
			}
			if json.Unmarshal([]byte(m.Data), &d) == nil {
				return d.SocketID
			}
		}
	}
	return ""
}

// syncEvent is an event no server knows: its answer is a pusher:error
// that names it, queued after the answers to every frame before it.
const syncEvent = "diff:sync"

var syncFrame = wsFrame{op: opText, fin: true, payload: []byte(`{"event":"` + syncEvent + `","data":{}}`), mask: &[4]byte{9, 8, 7, 6}}.bytes()

func hasClose(o serverOutput) bool { _, ok := closeFrameOf(o); return ok }

func countContaining(o serverOutput, s string) int {
	n := 0
	for _, f := range o.frames {
		if f.op == opText && bytes.Contains(f.payload, []byte(s)) {
			n++
		}
	}
	return n
}

func closeFrameOf(o serverOutput) (serverFrame, bool) {
	for _, f := range o.frames {
		if f.op == opClose {
			return f, true
		}
	}
	return serverFrame{}, false
}

// runStream sends st to the node listening on addr and returns what came
// back, normalised, one fact a line. It is the harness's only contact
// with a node: a third transport is compared by calling it with its
// address.
func runStream(addr string, st clientStream) []string {
	deadline := time.Now().Add(runDeadline)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return []string{"dial: " + err.Error()}
	}
	_ = c.SetDeadline(deadline) // writes too: a server that stops reading
	r := newConnReader(c)
	defer func() {
		_ = c.Close()
		<-r.done
	}()

	var notes []string
	var sent []byte
	failed := false // a write failed: the server is gone, the rest is dropped
	write := func(p []byte) {
		sent = append(sent, p...)
		if failed {
			return
		}
		if _, err := c.Write(p); err != nil {
			failed = true
		}
	}
	write(st.head)
	ses := &session{}
	awaited := map[string]int{}
	syncs := 0
	for _, s := range st.steps {
		if s.await != "" {
			awaited[s.await]++
			n := awaited[s.await]
			if !r.waitFor(deadline, func(o serverOutput) bool { return countContaining(o, s.await) >= n }) {
				notes = append(notes, fmt.Sprintf("await: no frame #%d containing %q", n, s.await))
			}
		}
		if s.awaitClose && !r.waitFor(deadline, func(o serverOutput) bool { _, ok := closeFrameOf(o); return ok }) {
			notes = append(notes, "await: no close frame")
		}
		data := s.data
		if s.build != nil {
			if ses.socketID == "" {
				r.waitFor(deadline, func(o serverOutput) bool { ses.socketID = socketIDOf(o); return ses.socketID != "" })
			}
			if ses.socketID == "" {
				notes = append(notes, "await: no connection_established")
				continue
			}
			data = s.build(ses)
		}
		sizes := []int{len(data)}
		if s.split != nil {
			sizes = s.split(len(data))
		}
		for i, k := range sizes {
			if i > 0 && s.pause > 0 {
				time.Sleep(s.pause)
			}
			write(data[:k])
			data = data[k:]
		}
		if o, err := r.state(); s.sync && err == nil && !hasClose(o) {
			syncs++
			write(syncFrame)
			if !r.waitFor(deadline, func(o serverOutput) bool { return countContaining(o, syncEvent) >= syncs || hasClose(o) }) {
				if _, err := r.state(); err == nil {
					notes = append(notes, "sync: no answer")
				}
			}
		}
	}

	if st.halfClose {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	// Read until the server ends the connection, or is quiet. Its close
	// frame is answered as a client does, unless this client sent one (or
	// its FIN) already; then the server gets closeLinger to end the
	// connection before a FIN does.
	echoed := st.halfClose || sentClose(st.head, sent)
	for {
		o, err := r.state()
		if err != nil {
			break
		}
		if f, ok := closeFrameOf(o); ok && !echoed {
			echoed = true
			echo := f.payload
			if len(echo) >= 2 {
				echo = echo[:2]
			}
			write(wsFrame{op: opClose, fin: true, payload: echo, mask: &[4]byte{1, 2, 3, 4}}.bytes())
			if !r.waitFor(time.Now().Add(closeLinger), func(serverOutput) bool { return false }) {
				if _, err := r.state(); err == nil {
					notes = append(notes, "the server kept the connection open after the close handshake")
					_ = c.(*net.TCPConn).CloseWrite()
				}
			}
			continue
		}
		if st.halfClose {
			// The server has had our FIN: it must end the connection.
			if !r.waitFor(deadline, func(serverOutput) bool { return false }) {
				if _, err := r.state(); err == nil {
					break // the deadline
				}
			}
			continue
		}
		timer := time.NewTimer(min(quietPeriod, time.Until(deadline)))
		select {
		case <-r.wake:
			timer.Stop()
			continue
		case <-timer.C:
		}
		break
	}
	o, err := r.state()
	return transcribe(o, err, ses, notes)
}

// sentClose reports whether the client's bytes after the head hold a
// close frame, parsed as the server would from the start.
func sentClose(head, sent []byte) bool {
	b := sent[len(head):]
	for {
		f, n, ok := parseFrame(b)
		if !ok {
			return false
		}
		if f.op == opClose {
			return true
		}
		b = b[n:]
	}
}

// transcribe writes o as lines, with the socket id and what derives from
// it named rather than spelled.
func transcribe(o serverOutput, readErr error, ses *session, notes []string) []string {
	norm := func(p []byte) string {
		s := string(p)
		if ses.socketID == "" {
			ses.socketID = socketIDOf(o)
		}
		if ses.socketID != "" {
			s = strings.ReplaceAll(s, ses.socketID, "<socket_id>")
		}
		for _, d := range ses.derived {
			s = strings.ReplaceAll(s, d, "<auth>")
		}
		return s
	}
	var lines []string
	if o.headDone {
		lines = append(lines, "status: "+o.status)
		for _, h := range []string{"Upgrade", "Connection", "Sec-WebSocket-Accept", "Sec-WebSocket-Version"} {
			if v := o.header.Values(h); len(v) > 0 {
				lines = append(lines, h+": "+strings.Join(v, ", "))
			}
		}
	}
	for _, f := range o.frames {
		l := [...]string{opCont: "cont", opText: "text", opBinary: "binary", opClose: "close", opPing: "ping", opPong: "pong", 0xf: ""}[f.op]
		if l == "" {
			l = fmt.Sprintf("op%#x", f.op)
		}
		if !f.fin {
			l += " fin=0"
		}
		if f.rsv != 0 {
			l += fmt.Sprintf(" rsv=%#x", f.rsv)
		}
		if f.masked {
			l += " masked"
		}
		p := f.payload
		if f.op == opClose && len(p) >= 2 {
			l += fmt.Sprintf(" code=%d", binary.BigEndian.Uint16(p))
			p = p[2:]
		}
		if len(p) > 0 || f.op == opClose {
			s := norm(p)
			if len(s) > 300 {
				s = fmt.Sprintf("%s... (%d bytes)", s[:300], len(s))
			}
			l += " " + strconv.Quote(s)
		}
		lines = append(lines, l)
	}
	if o.trailing > 0 {
		// After a 101, part of a frame; before it, a head that never ended.
		lines = append(lines, fmt.Sprintf("trailing: %d bytes", o.trailing))
	}
	lines = append(lines, notes...)
	return append(lines, "end: "+endOf(readErr))
}

// endsSilently checks the event loop's answer alone, against the right
// one: no frame after connection_established, and the connection ended
// (the goroutine transport's varies: eofInMessage).
func endsSilently(t *testing.T, flaw string, _, lines []string) {
	t.Helper()
	var frames []string // what transcribe writes per frame, and a partial one
	for _, l := range lines {
		switch w, _, _ := strings.Cut(l, " "); {
		case slices.Contains([]string{"text", "binary", "close", "ping", "pong", "cont", "trailing:"}, w), strings.HasPrefix(w, "op0x"):
			frames = append(frames, l)
		}
	}
	msg := "the event loop's answer where the goroutine transport's varies (%s):\n%s"
	require.Len(t, frames, 1, msg, flaw, strings.Join(lines, "\n"))
	require.Contains(t, frames[0], "pusher:connection_established", msg, flaw, strings.Join(lines, "\n"))
	require.Equal(t, "end: closed", lines[len(lines)-1], msg, flaw, strings.Join(lines, "\n"))
}

// agreeButPongs requires the same answer of both transports once their
// pusher:pong replies are left out: a reply to a message that came in the
// same read as the close frame or the connection's end may be dropped by
// either (dropped), the rest may not differ.
func agreeButPongs(t *testing.T, flaw string, want, got []string) {
	t.Helper()
	drop := func(lines []string) string {
		return strings.Join(slices.DeleteFunc(slices.Clone(lines), func(l string) bool {
			return strings.Contains(l, `\"event\":\"pusher:pong\"`)
		}), "\n")
	}
	assert.Equal(t, drop(want), drop(got), "the transports disagree beyond a dropped pong (%s)", flaw)
}

// endOf says how the server's side of the connection ended.
func endOf(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "open"
	// A FIN or an RST: which one depends on whether the server's kernel
	// held unread client bytes when the server closed, a race whenever the
	// server closes mid-stream (a protocol error) or our close frame
	// crosses its FIN; the oracle itself varies. So both are "closed".
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return "closed"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "error: " + err.Error()
}

// requireSame runs st against both nodes at once and requires the same
// transcript.
func requireSame(t testing.TB, oracle, subject string, st clientStream) {
	t.Helper()
	var want, got []string
	var wg sync.WaitGroup
	wg.Go(func() { want = runStream(oracle, st) })
	wg.Go(func() { got = runStream(subject, st) })
	wg.Wait()
	if w, g := strings.Join(want, "\n"), strings.Join(got, "\n"); w != g {
		assert.Equal(t, w, g, "the transports disagree (expected: goroutine, actual: eventloop)")
		t.FailNow()
	}
}

// ---- the corpus

type diffCase struct {
	name string
	st   clientStream
	// flaw, when set, is why the oracle answers this stream differently
	// from run to run (a difference wsnode's doc.go states), and check
	// how the answers are compared instead of frame for frame.
	flaw  string
	check func(t *testing.T, flaw string, want, got []string)
}

// pusherJSSession is what pusher-js (and Laravel Echo over it) sends on a
// connect or a reconnect, as connection id: once connected, every
// subscription of the page in one burst with a ping, then a client event
// on a private channel, the unsubscribes and a ping, then a close.
// Channel names carry id, so sessions running at once share no channel.
func pusherJSSession(id string, maskSeed uint64, zeroMask bool, split splitter, pause time.Duration) clientStream {
	public, private, presence := id+"-orders", "private-App.Models.User."+id, "presence-chat."+id
	cacheCh, encrypted := "cache-"+id, "private-encrypted-"+id
	channelData := `{"user_id":"` + id + `","user_info":{"name":"Ann"}}`
	subscribes := func(s *session, m *masker) []byte {
		var b []byte
		b = append(b, m.text(subscribeFrame(public, "", ""))...)
		b = append(b, m.text(subscribeFrame(private, s.sign(s.socketID+":"+private), ""))...)
		b = append(b, m.text(subscribeFrame(presence, s.sign(s.socketID+":"+presence+":"+channelData), channelData))...)
		b = append(b, m.text(subscribeFrame(cacheCh, "", ""))...)
		b = append(b, m.text(subscribeFrame(encrypted, s.sign(s.socketID+":"+encrypted), ""))...)
		return append(b, m.text(`{"event":"pusher:ping","data":{}}`)...)
	}
	rest := func(_ *session, m *masker) []byte {
		var b []byte
		b = append(b, m.text(`{"event":"client-typing","channel":"`+private+`","data":{"name":"Ann","typing":true}}`)...)
		b = append(b, m.text(`{"event":"client-whisper","channel":"`+presence+`","data":"é ✓"}`)...)
		for _, ch := range []string{public, private, presence, cacheCh, encrypted} {
			b = append(b, m.text(`{"event":"pusher:unsubscribe","data":{"channel":"`+ch+`"}}`)...)
		}
		return append(b, m.text(`{"event":"pusher:ping","data":{}}`)...)
	}
	// Each build makes its own masker: it runs once per node, at once.
	with := func(seed uint64, f func(*session, *masker) []byte) func(*session) []byte {
		return func(s *session) []byte { return f(s, newMasker(seed, zeroMask)) }
	}
	return clientStream{head: pusherHead(), steps: []step{
		{build: with(maskSeed, subscribes), split: split, pause: pause},
		{await: "pusher:pong", build: with(maskSeed+1, rest), split: split, pause: pause},
		{await: "pusher:pong", data: newMasker(maskSeed+2, zeroMask).frame(opClose, true, closePayload(1000, ""))},
	}}
}

// synced is the stream that sends data once connection_established came,
// one message at a time, each followed by a sync (step.sync). It cuts
// where the server will have read whole messages (no fragmented message
// open), up to a client close frame or bytes that are not a whole frame:
// those go last, unsynced, then the FIN if halfClose, unless the FIN
// would fall inside a message (eofInMessage).
func synced(data []byte, split splitter, halfClose bool) clientStream {
	segs, lastWhole := segments(data)
	st := clientStream{head: pusherHead(), halfClose: halfClose && !inMessage(data)}
	for i, seg := range segs {
		st.steps = append(st.steps, step{data: seg, split: split, sync: i < len(segs)-1 || lastWhole})
	}
	st.steps[0].await = "pusher:connection_established"
	return st
}

// maxSyncs bounds the syncs of one stream; the rest goes in one piece.
const maxSyncs = 64

// segments cuts b after each whole message (synced); lastWhole says
// whether the last piece ends one too.
func segments(b []byte) (segs [][]byte, lastWhole bool) {
	start, off, open := 0, 0, false
	for len(segs) < maxSyncs {
		f, n, ok := parseFrame(b[off:])
		if !ok || f.op == opClose {
			break
		}
		off += n
		if f.op < opClose { // a data frame opens a message or goes on with one, until FIN
			open = !f.fin
		}
		if !open {
			segs, start = append(segs, b[start:off]), off
		}
	}
	if start < len(b) || len(segs) == 0 {
		return append(segs, b[start:]), false
	}
	return segs, true
}

// inMessage says whether an EOF after b falls inside a message: a
// fragmented message is open, or the last frame's header is whole and its
// payload is not. The oracle then varies from run to run (eofInMessage).
func inMessage(b []byte) bool {
	open := false
	for {
		f, n, ok := parseFrame(b)
		if !ok {
			break
		}
		if f.op < opClose {
			open = !f.fin
		}
		b = b[n:]
	}
	if open || len(b) < 2 {
		return open
	}
	head := 2 + map[byte]int{126: 2, 127: 8}[b[1]&0x7f]
	if b[1]&0x80 != 0 {
		head += 4
	}
	return len(b) >= head
}

// eofInMessage is the oracle's flaw that inMessage avoids: coder/websocket
// takes an io.EOF met inside a message (the next fragment's header, or a
// payload read that gets no byte) for the end of the message
// (msgReader.Read), the node answers the part as a whole message, and
// whether that answer leaves before the socket is torn down is a race.
// The right answer is the end of the connection, no frame.
const eofInMessage = "goroutine transport: an EOF inside a message is taken for its end, whose answer races the teardown"

func connected(data []byte) clientStream { return synced(data, nil, false) }

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func diffCorpus() []diffCase {
	var cs []diffCase
	add := func(name string, st clientStream) { cs = append(cs, diffCase{name: name, st: st}) }
	m := newMasker(1, false)
	ping := `{"event":"pusher:ping","data":{}}`
	closeOK := m.frame(opClose, true, closePayload(1000, ""))

	// pusher-js and Laravel Echo, split every way.
	n := 0
	session := func(name string, zero bool, split splitter, pause time.Duration) {
		n++
		add("session/"+name, pusherJSSession("s"+strconv.Itoa(n), uint64(n), zero, split, pause))
	}
	session("one-write", false, nil, 0)
	session("zero-mask", true, nil, 0)
	session("bytewise", false, bytewise, 0)
	for seed := range uint64(6) {
		session("random-"+strconv.FormatUint(seed, 10), seed%2 == 0, randomSplit(seed, 1+int(seed)*13), 0)
	}
	session("random-paused", false, randomSplit(99, 40), time.Millisecond)
	// A public subscribe in the handshake's own write, before the 101.
	early := pusherHead()
	early = append(early, m.text(subscribeFrame("early", "", ""))...)
	add("session/in-handshake-write", clientStream{head: append(early, m.text(ping)...), steps: []step{{sync: true}}})
	add("session/bad-auth", connected(m.text(subscribeFrame("private-bad", appKey+":0000", ""))))
	add("session/unknown-event", connected(m.text(`{"event":"pusher:nothing","data":{}}`)))
	add("session/not-json", connected(m.text(`{"event":`)))
	add("session/empty-text", connected(m.text("")))

	// Fragmented messages, with control frames between the fragments.
	for k := 2; k <= 5; k++ {
		add(fmt.Sprintf("fragments/%d", k), connected(m.fragments(opText, []byte(ping), k)))
		add(fmt.Sprintf("fragments/%d-ping-between", k), connected(m.fragments(opText, []byte(ping), k, m.frame(opPing, true, []byte("hello")))))
		add(fmt.Sprintf("fragments/%d-pong-between", k), connected(m.fragments(opText, []byte(ping), k, m.frame(opPong, true, nil))))
	}
	add("fragments/ping-125", connected(m.frame(opPing, true, bytes.Repeat([]byte("p"), 125))))
	add("fragments/ping-empty", connected(m.frame(opPing, true, nil)))
	add("fragments/pong-unsolicited", connected(concat(m.frame(opPong, true, []byte("x")), m.text(ping))))
	add("fragments/cont-first", connected(m.frame(opCont, true, []byte(ping))))
	add("fragments/text-in-text", connected(concat(m.frame(opText, false, []byte(`{"event":`)), m.text(ping))))
	add("fragments/ping-not-fin", connected(m.frame(opPing, false, []byte("x"))))
	add("fragments/ping-126", connected(m.frame(opPing, true, bytes.Repeat([]byte("p"), 126))))
	add("fragments/close-in-message", connected(concat(m.frame(opText, false, []byte(`{"ev`)), closeOK)))
	cs = append(cs, diffCase{"fragments/unfinished-then-eof", clientStream{head: pusherHead(), halfClose: true,
		steps: []step{{await: "pusher:connection_established", data: m.frame(opText, false, []byte(`{"ev`))}}}, eofInMessage, endsSilently})

	// A reply queued, then the connection ends in the same write: the
	// goroutine transport drops the reply most of the time (28, 26 and 25
	// runs in 30), the event loop too, since the close frame or teardown
	// does not wait for the socket's queue (RFC 6455 allows no frame after
	// a close). The rest of the answer is the same.
	dropped := "a reply queued before a close or an EOF in the same read may be dropped"
	raw := func(name string, halfClose bool, data []byte) {
		cs = append(cs, diffCase{name, clientStream{head: pusherHead(), halfClose: halfClose,
			steps: []step{{await: "pusher:connection_established", data: data}}}, dropped, agreeButPongs})
	}
	raw("close/right-after-ping", false, concat(m.text(ping), closeOK))
	raw("eof/right-after-ping", true, m.text(ping))
	raw("utf8/invalid-right-after-ping", false, concat(m.text(ping), m.frame(opText, true, []byte("\xff"))))

	// Masks.
	add("mask/zero", connected(newMasker(0, true).text(ping)))
	add("mask/unmasked", connected(wsFrame{op: opText, fin: true, payload: []byte(ping)}.bytes()))
	add("mask/unmasked-close", connected(wsFrame{op: opClose, fin: true, payload: closePayload(1000, "")}.bytes()))
	add("mask/unmasked-ping", connected(wsFrame{op: opPing, fin: true, payload: []byte("x")}.bytes()))
	add("mask/unmasked-continuation", connected(concat(m.frame(opText, false, []byte(`{"ev`)),
		wsFrame{op: opCont, fin: true, payload: []byte(`ent":"pusher:ping","data":{}}`)}.bytes())))

	// UTF-8.
	bad := []byte(`{"event":"client-x","channel":"private-x","data":"` + "\xff\xfe" + `"}`)
	add("utf8/invalid", connected(m.frame(opText, true, bad)))
	euro := []byte(`{"event":"pusher:ping","data":"€"}`) // € is 3 bytes: cut inside it
	i := bytes.Index(euro, []byte("€")) + 1
	add("utf8/valid-split-across-fragments", connected(concat(m.frame(opText, false, euro[:i]), m.frame(opCont, true, euro[i:]))))
	add("utf8/invalid-split-across-fragments", connected(concat(m.frame(opText, false, euro[:i]), m.frame(opCont, true, euro[i+1:]))))
	add("utf8/truncated-at-end", connected(m.frame(opText, true, []byte("\xe2\x82"))))
	add("utf8/binary-not-checked", connected(m.frame(opBinary, true, []byte("\xff"))))
	add("utf8/binary", connected(m.frame(opBinary, true, []byte(ping))))
	add("utf8/binary-fragmented", connected(m.fragments(opBinary, []byte(ping), 3)))

	// Sizes around the read limit.
	pad := func(n int) []byte {
		p := []byte(`{"event":"pusher:ping","data":"`)
		p = append(p, bytes.Repeat([]byte("a"), n-len(p)-2)...)
		return append(p, `"}`...)
	}
	add("size/at-limit", connected(m.text(string(pad(diffReadLimit)))))
	add("size/over-limit", connected(m.text(string(pad(diffReadLimit+1)))))
	add("size/message-over-limit", connected(m.fragments(opText, pad(diffReadLimit+1), 3)))
	add("size/message-at-limit", connected(m.fragments(opText, pad(diffReadLimit), 4)))
	add("size/huge-header", connected(wsFrame{op: opText, fin: true, mask: m.key(), length: 1 << 40}.bytes()))
	add("size/2^62-header", connected(wsFrame{op: opBinary, fin: true, mask: m.key(), length: 1 << 62}.bytes()))
	add("size/fragment-claims-past-limit", connected(concat(m.frame(opText, false, pad(diffReadLimit)[:100]),
		wsFrame{op: opCont, fin: true, mask: m.key(), length: diffReadLimit}.bytes())))
	add("size/header-past-limit-then-more", connected(concat(wsFrame{op: opText, fin: true, mask: m.key(), length: diffReadLimit + 1}.bytes(),
		m.text(ping))))
	add("size/64-bit-top-bit", connected(wsFrame{op: opText, fin: true, mask: m.key(), length: 1 << 63}.bytes()))
	add("size/127-for-small", connected([]byte{0x81, 0xff, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2}))
	add("size/126-for-small", connected([]byte{0x81, 0xfe, 0, 2, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2}))

	// Client close codes.
	for _, code := range []uint16{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4000, 4999,
		0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535} {
		add(fmt.Sprintf("close/code-%d", code), connected(m.frame(opClose, true, closePayload(code, "bye"))))
	}
	add("close/empty", connected(m.frame(opClose, true, nil)))
	add("close/one-byte", connected(m.frame(opClose, true, []byte{0x03})))
	add("close/reason-invalid-utf8", connected(m.frame(opClose, true, closePayload(1000, "\xff"))))
	add("close/reason-truncated-utf8", connected(m.frame(opClose, true, closePayload(4000, "bye \xe2\x82"))))
	add("close/reason-utf8", connected(m.frame(opClose, true, closePayload(4000, "au revoir é ✓"))))
	add("close/reason-invalid-utf8-bytewise", synced(m.frame(opClose, true, closePayload(1001, "\xc0\xaf")), bytewise, false))
	add("close/reason-123", connected(m.frame(opClose, true, closePayload(1000, strings.Repeat("r", 123)))))
	add("close/reason-124", connected(m.frame(opClose, true, closePayload(1000, strings.Repeat("r", 124)))))
	add("close/not-fin", connected(m.frame(opClose, false, closePayload(1000, ""))))
	add("close/twice", connected(concat(closeOK, closeOK)))
	add("close/frames-after", connected(concat(closeOK, m.text(ping), m.frame(opPing, true, []byte("x")))))
	add("close/ping-before-echo", clientStream{head: pusherHead(), steps: []step{
		{await: "pusher:connection_established", data: m.frame(opText, true, bad)},
		{awaitClose: true, data: m.frame(opPing, true, []byte("during close"))},
	}})
	add("close/text-before-echo", clientStream{head: pusherHead(), steps: []step{
		{await: "pusher:connection_established", data: m.frame(opText, true, bad)},
		{awaitClose: true, data: m.text(ping)},
	}})
	add("close/ping-then-close", connected(concat(m.frame(opPing, true, []byte("x")), closeOK)))

	// EOF and half-close.
	eof := func(name string, data []byte) {
		add("eof/"+name, synced(data, nil, true))
	}
	full := m.text(ping)
	eof("at-boundary", full)
	eof("mid-header-1", full[:1])
	eof("mid-header-mask", full[:4])
	// Part of the payload in one write, then the FIN: the server's read of
	// the payload gets the part and then io.ErrUnexpectedEOF.
	cs = append(cs, diffCase{name: "eof/mid-payload", st: clientStream{head: pusherHead(), halfClose: true,
		steps: []step{{await: "pusher:connection_established", data: full[:len(full)-3]}}}})
	cs = append(cs, diffCase{"eof/payload-not-begun", clientStream{head: pusherHead(), halfClose: true,
		steps: []step{{await: "pusher:connection_established", data: full[:6]}}}, eofInMessage, endsSilently})
	eof("mid-extended-length", m.text(string(pad(300)))[:3])
	eof("after-close", closeOK)
	add("eof/mid-head", clientStream{head: pusherHead()[:20], halfClose: true})
	add("eof/head-only", clientStream{head: pusherHead(), halfClose: true})

	// RSV bits and opcodes.
	for _, rsv := range []byte{0x40, 0x20, 0x10} {
		add(fmt.Sprintf("rsv/%#x", rsv), connected(wsFrame{op: opText, fin: true, rsv: rsv, payload: []byte(ping), mask: m.key()}.bytes()))
	}
	add("rsv/on-ping", connected(wsFrame{op: opPing, fin: true, rsv: 0x40, mask: m.key()}.bytes()))
	for _, op := range []byte{0x3, 0x7, 0xb, 0xf} {
		add(fmt.Sprintf("opcode/%#x", op), connected(m.frame(op, true, []byte("x"))))
	}

	// Handshakes.
	app := "/app/" + appKey + pusherJSQuery
	// The sync, sent at once, is answered after connection_established if
	// the upgrade succeeds; an HTTP error ends the connection.
	hs := func(name string, head []byte) {
		add("handshake/"+name, clientStream{head: head, steps: []step{{sync: true}}})
	}
	hs("ok", upgrade("GET", app, nil))
	hs("version-8", upgrade("GET", app, []string{"Sec-WebSocket-Version"}, "Sec-WebSocket-Version: 8"))
	hs("no-version", upgrade("GET", app, []string{"Sec-WebSocket-Version"}))
	hs("no-key", upgrade("GET", app, []string{"Sec-WebSocket-Key"}))
	hs("short-key", upgrade("GET", app, []string{"Sec-WebSocket-Key"}, "Sec-WebSocket-Key: c2hvcnQ="))
	hs("post", upgrade("POST", app, nil))
	hs("no-upgrade", upgrade("GET", app, []string{"Upgrade"}))
	hs("upgrade-h2c", upgrade("GET", app, []string{"Upgrade"}, "Upgrade: h2c"))
	hs("no-connection", upgrade("GET", app, []string{"Connection"}))
	hs("connection-list", upgrade("GET", app, []string{"Connection"}, "Connection: keep-alive, Upgrade"))
	hs("unknown-app", upgrade("GET", "/app/nokey"+pusherJSQuery, nil))
	hs("disabled-app", upgrade("GET", "/app/"+diffOffKey+pusherJSQuery, nil))
	hs("no-protocol", upgrade("GET", "/app/"+appKey+"?client=js", nil))
	hs("protocol-4", upgrade("GET", "/app/"+appKey+"?protocol=4", nil))
	hs("protocol-junk", upgrade("GET", "/app/"+appKey+"?protocol=x", nil))
	hs("origin-refused", upgrade("GET", "/app/"+diffOrigKey+pusherJSQuery, nil, "Origin: https://evil.example"))
	hs("origin-allowed", upgrade("GET", "/app/"+diffOrigKey+pusherJSQuery, nil, "Origin: https://good.example"))
	hs("origin-absent", upgrade("GET", "/app/"+diffOrigKey+pusherJSQuery, nil))
	hs("origin-twice", upgrade("GET", "/app/"+diffOrigKey+pusherJSQuery, nil, "Origin: https://good.example", "Origin: https://evil.example"))
	hs("origin-userinfo", upgrade("GET", "/app/"+diffOrigKey+pusherJSQuery, nil, "Origin: https://evil.example:443@good.example"))
	hs("other-path", upgrade("GET", "/nothere", nil))
	// pusher-js with wsPath "/r/"+id (wsfront.ParsePath).
	hs("resume-id", upgrade("GET", "/r/page-0123_abc/app/"+appKey+pusherJSQuery, nil))
	hs("resume-id-unknown-app", upgrade("GET", "/r/page-0123_abc/app/nokey"+pusherJSQuery, nil))
	hs("resume-id-short", upgrade("GET", "/r/page/app/"+appKey+pusherJSQuery, nil))
	hs("resume-id-bad-byte", upgrade("GET", "/r/page.0123/app/"+appKey+pusherJSQuery, nil))
	hs("resume-id-alone", upgrade("GET", "/r/page-0123_abc"+pusherJSQuery, nil))
	hs("http-1.0", bytes.Replace(upgrade("GET", app, nil), []byte("HTTP/1.1"), []byte("HTTP/1.0"), 1))
	hs("extension-offered", upgrade("GET", app, nil, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"))
	hs("subprotocol-offered", upgrade("GET", app, nil, "Sec-WebSocket-Protocol: chat"))
	hs("garbage", []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"))
	return cs
}

// TestTransportsAgree sends every stream of the corpus to a node on each
// transport and requires the same answer, frame for frame. Streams run
// many at once (each waits mostly on the network or its quiet period),
// then each is compared in a subtest of its own.
func TestTransportsAgree(t *testing.T) {
	t.Parallel()
	oracle, subject := diffTargets(t, func(tb testing.TB) hclog.Logger {
		l := logging.TestLogger(tb)
		l.SetLevel(hclog.Warn) // a line per socket otherwise, of hundreds of sockets at once
		return l
	})
	cases := diffCorpus()
	want, got := make([][]string, len(cases)), make([][]string, len(cases))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i, c := range cases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var pair sync.WaitGroup
			pair.Go(func() { want[i] = runStream(oracle, c.st) })
			pair.Go(func() { got[i] = runStream(subject, c.st) })
			pair.Wait()
		})
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, g := strings.Join(want[i], "\n"), strings.Join(got[i], "\n")
			if c.check != nil {
				c.check(t, c.flaw, want[i], got[i])
				return
			}
			assert.Equal(t, w, g, "the transports disagree (expected: goroutine, actual: eventloop)")
			if testing.Verbose() {
				t.Log("\n" + w)
			}
		})
	}
}

// TestTransportsAgreeOnTheFrameBudget: on nodes whose sockets may send 20
// frames and no more (no refill, so the cut does not depend on the
// clock), floods of control frames and of empty continuations are cut at
// the same frame with the same answers, and what follows the cut is read
// as the close's answer on both. Each stream fits one 512-byte read of
// the goroutine transport: a close with client bytes still unread in the
// kernel resets the connection, and the reset can drop what the client
// had not read yet (see endOf).
func TestTransportsAgreeOnTheFrameBudget(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the event loop transport needs Linux")
	}
	const burst = 20
	srv := redistest.New(t)
	log := logging.TestLogger(t)
	log.SetLevel(hclog.Warn)
	budget := func(a *wsnode.App) { a.SetFrameBudget(0, burst) }
	oracle := startTransport(t, srv, config.TransportGoroutine, log, budget)
	subject := startTransport(t, srv, config.TransportEventLoop, log, budget)
	m := newMasker(3, false)
	repeat := func(n int, f func(i int) []byte) []byte {
		var b []byte
		for i := range n {
			b = append(b, f(i)...)
		}
		return b
	}
	emptyPings := repeat(3*burst, func(int) []byte { return m.frame(opPing, true, nil) })
	conts := concat(m.frame(opText, false, []byte(`{"event":`)), repeat(3*burst, func(int) []byte { return m.frame(opCont, false, nil) }),
		m.frame(opCont, true, []byte(`"pusher:ping","data":{}}`)))
	// The budget counts the connection's frames: connection_established
	// takes none, so frame burst+1 is the first past it.
	pingsThen := func(n int, tail []byte) []byte {
		return concat(repeat(n, func(i int) []byte { return m.frame(opPing, true, []byte(strconv.Itoa(i))) }), tail)
	}
	once := func(data []byte) clientStream {
		return clientStream{head: pusherHead(), steps: []step{{await: "pusher:connection_established", data: data}}}
	}
	cases := map[string]clientStream{
		"empty pings":               once(emptyPings),
		"pongs":                     once(repeat(3*burst, func(int) []byte { return m.frame(opPong, true, []byte("x")) })),
		"empty continuations":       once(conts),
		"close within the budget":   once(pingsThen(burst-1, m.frame(opClose, true, closePayload(1000, "bye")))),
		"close past the budget":     once(pingsThen(burst, m.frame(opClose, true, closePayload(1000, "bye")))),
		"ping past the budget":      once(pingsThen(burst+1, nil)),
		"bad frame past the budget": once(pingsThen(burst, m.frame(0x3, true, nil))),
	}
	for name, st := range cases {
		require.LessOrEqual(t, len(st.steps[0].data), 500, name)
	}
	for name, st := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireSame(t, oracle, subject, st)
		})
	}
}

// FuzzTransports sends fuzzed bytes after a valid handshake to a node on
// each transport and requires the same answer. The nodes start once per
// fuzz run. The bytes go as synced sends them; split cuts them into
// writes, and the stream ends in a FIN but for one split in 16, which
// waits out the quiet period instead.
func FuzzTransports(f *testing.F) {
	for _, c := range diffCorpus() {
		if !bytes.Equal(c.st.head, pusherHead()) {
			continue
		}
		ses := &session{socketID: "123.456"}
		var data []byte
		for _, s := range c.st.steps {
			if s.build != nil {
				data = append(data, s.build(ses)...)
			} else {
				data = append(data, s.data...)
			}
		}
		f.Add(data, uint16(len(c.name)))
	}
	// The fuzzer minimizes every input that adds coverage, for up to 60 s
	// (-fuzzminimizetime); at two exchanges with the nodes per try (about
	// 15 ms) a 10 s `make fuzz` would do nothing else. So minimizing is off
	// unless the command line asks for it.
	set := false
	flag.Visit(func(fl *flag.Flag) { set = set || fl.Name == "test.fuzzminimizetime" })
	if !set {
		require.NoError(f, flag.Set("test.fuzzminimizetime", "0"))
	}
	oracle, subject := diffTargets(f, func(testing.TB) hclog.Logger { return hclog.NewNullLogger() })
	f.Fuzz(func(t *testing.T, data []byte, split uint16) {
		requireSame(t, oracle, subject, synced(data, randomSplit(uint64(split), 1+int(split>>4)%64), split%16 != 0))
	})
}
