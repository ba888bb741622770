package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
)

// The harness of issue 41: what a dropped connection loses. Real
// pusher-js and Laravel Echo clients (test/compat/resume.js), each with
// wsPath "/r/<its id>" and pusher-js's own reconnect, connect through a
// balancer over two wsnodes that cuts their TCP connections at random
// (a reset or a plain close, both directions), while the test publishes
// a sequence number per channel at a steady rate through the httpapi.
// During the run one wsnode is SIGKILLed (a new one takes its place) and
// the other drained. The check, per client and channel: events arrive
// in order, and the loss is what was published from the first event the
// client got to the end that never arrived.
//
// The channels resume-a and resume-b have a history (the apps file's
// "resume-" prefix), so with every client connected by its id they
// resume: there must be no loss, and the duplicates stay within
// resumeDupsPerReconnect per reconnect. plain-a and plain-b have none:
// delivery there is at most once, and the loss is measured, for
// comparison (BenchmarkResume runs both).
const (
	// resumeRate is the events per second published on each channel.
	resumeRate = 50
	// resumeDupsPerReconnect bounds the duplicates with resume on: a page
	// resumes after what it acknowledged (a pong to the node's ping, every
	// second), and after a wsnode's SIGKILL after the node's last
	// checkpoint (every second): two seconds of both channels at most.
	resumeDupsPerReconnect = 2 * resumeRate * 2
	// resumePusherJS, resumeEcho: the clients of each kind.
	resumePusherJS, resumeEcho = 4, 4
)

var (
	resumeChannels = []string{"resume-a", "resume-b"}
	plainChannels  = []string{"plain-a", "plain-b"}
)

// TestResume runs the harness with resume on for 10 s of publishing
// (about 30 s in all) and requires that no event is lost, on one Redis
// and on a 3-master Redis Cluster (the history and the resume state on
// the app's shard, events by sharded pub/sub).
func TestResume(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			t.Parallel()
			r := runResume(t, 10*time.Second, true, cluster)
			r.check(t)
			t.Log(r)
		})
	}
}

// BenchmarkResume runs the harness for 30 s of publishing, with resume
// off (channels without history) and on (about 70 s in all), with
// `go test -run '^$' -bench BenchmarkResume -benchtime 1x ./test/e2e/`.
func BenchmarkResume(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			for range b.N {
				r := runResume(b, 30*time.Second, on, false)
				r.check(b)
				b.Log(r)
				b.ReportMetric(float64(r.lost)/float64(max(1, r.reconnects)), "lost-events/cut")
				b.ReportMetric(100*float64(r.lost)/float64(max(1, r.expected)), "lost-%")
				b.ReportMetric(float64(r.dups), "duplicates")
				b.ReportMetric(float64(r.toLiveAt(0.5).Milliseconds()), "reconnect-to-live-ms-p50")
				b.ReportMetric(float64(r.reconnects), "reconnects")
			}
		})
	}
}

// resumeResult is what one run measured, over every client and channel.
type resumeResult struct {
	on         bool
	published  int // events published (per channel, summed)
	expected   int // events due to the clients: in their windows
	lost       int // of those, never received
	dups       int // received again
	disorder   []string
	missing    []string // the first lost events, to say which
	failed     []string // the headcount:resume_failed received
	reconnects int      // connections through the balancer past each client's first
	cuts       int      // of those, the balancer's cuts
	paths      []string
	pathsAt    []time.Time // when each of paths came
	// toLive are the reconnects' times from the request at the balancer
	// to the client's subscription_succeeded on its last channel, which
	// its replay follows in the same writes, sorted.
	toLive []time.Duration
}

// toLiveAt is the q-quantile of toLive.
func (r resumeResult) toLiveAt(q float64) time.Duration {
	if len(r.toLive) == 0 {
		return 0
	}
	return r.toLive[min(len(r.toLive)-1, int(q*float64(len(r.toLive))))]
}

func (r resumeResult) String() string {
	return fmt.Sprintf("resume on=%v: %d events published, %d due to clients, %d lost (%.2f%%), %d duplicates, %d reconnects (the balancer cut %d connections; the SIGKILL and the drain ended others): %.1f events lost per reconnect; reconnect to subscribed p50 %v, max %v",
		r.on, r.published, r.expected, r.lost, 100*float64(r.lost)/float64(max(1, r.expected)), r.dups, r.reconnects, r.cuts,
		float64(r.lost)/float64(max(1, r.reconnects)), r.toLiveAt(0.5), r.toLiveAt(1))
}

// check asserts what holds with resume off already, and no loss with it
// on.
func (r resumeResult) check(tb testing.TB) {
	tb.Helper()
	require.Empty(tb, r.disorder, "events out of order")
	require.Positive(tb, r.cuts, "the balancer cut no connection")
	for _, p := range r.paths {
		require.True(tb, strings.HasPrefix(p, "GET /r/"), "a client connected without its wsPath: %q", p)
	}
	for _, kind := range []string{"/r/js-", "/r/echo-"} {
		require.True(tb, slices.ContainsFunc(r.paths, func(p string) bool { return strings.Contains(p, kind) }), "no %s connection", kind)
	}
	if !r.on {
		require.Zero(tb, r.dups, "duplicates without resume")
		return
	}
	require.Zero(tb, r.lost, "events lost with resume on: %v (resume_failed: %v)", r.missing, r.failed)
	require.Empty(tb, r.failed, "resume_failed with a history that holds the whole run")
	require.LessOrEqual(tb, r.dups, r.reconnects*resumeDupsPerReconnect, "duplicates with resume on")
}

// resumeLog is what resume.js reported, by client and channel.
type resumeLog struct {
	mu    sync.Mutex
	ready chan struct{}
	seqs  map[[2]string][]int
	// failed are the headcount:resume_failed the clients got.
	failed []string
	// subs are the times (unix ms) of each client's subscription_succeeded.
	subs map[string][]int64
}

func (l *resumeLog) read(sc *bufio.Scanner) {
	for sc.Scan() {
		var m struct {
			Ready  *int            `json:"ready"`
			Client string          `json:"c"`
			Chan   string          `json:"ch"`
			Seq    *int            `json:"seq"`
			Failed json.RawMessage `json:"failed"`
			Sub    *int64          `json:"sub"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		l.mu.Lock()
		switch {
		case m.Ready != nil:
			close(l.ready)
		case m.Sub != nil:
			l.subs[m.Client] = append(l.subs[m.Client], *m.Sub)
		case m.Failed != nil:
			l.failed = append(l.failed, m.Client+" "+m.Chan+" "+string(m.Failed))
		case m.Seq != nil:
			k := [2]string{m.Client, m.Chan}
			l.seqs[k] = append(l.seqs[k], *m.Seq)
		}
		l.mu.Unlock()
	}
}

// caughtUp reports whether every client got seq last on every channel.
func (l *resumeLog) caughtUp(last int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.seqs) < (resumePusherJS+resumeEcho)*len(resumeChannels) { // as many as plainChannels
		return false
	}
	for _, s := range l.seqs {
		if len(s) == 0 || s[len(s)-1] < last {
			return false
		}
	}
	return true
}

// runResume runs the harness with publishing for publishFor, on channels
// with a history (on) or without, on one Redis or a Cluster.
func runResume(tb testing.TB, publishFor time.Duration, on, cluster bool) resumeResult {
	channels := plainChannels
	if on {
		channels = resumeChannels
	}
	compat := filepath.Join(repoRoot(tb), "test", "compat")
	for _, pkg := range []string{"pusher-js", "laravel-echo"} {
		if _, err := os.Stat(filepath.Join(compat, "node_modules", pkg, "package.json")); err != nil {
			tb.Fatalf("%s is not installed in test/compat/node_modules: run `make test` (it runs npm ci there): %v", pkg, err)
		}
	}
	appsFile := writeAppsFile(tb, []map[string]any{{
		"id": e2eAppID, "key": e2eAppKey, "secret": e2eAppSecret,
		"history": []map[string]any{{"prefix": "resume-", "events": 10000, "seconds": 300}},
	}})
	common := []string{"--apps-file", appsFile}
	if cluster {
		common = append(common, "--redis-cluster", redistest.NewCluster(tb).Seeds())
	} else {
		common = append(common, "--redis", redistest.New(tb).URL())
	}
	a, b := startWSNode(tb, "ws-a", common...), startWSNode(tb, "ws-b", common...)
	for _, n := range []node{a, b} {
		waitReady(tb, n.p, n.admin)
	}
	_, api := startAPI(tb, common...)

	lb := newBalancer(tb, a.addr, b.addr)
	res := resumeResult{on: on}
	var mu sync.Mutex // guards res.paths
	var cutting atomic.Bool
	var cuts atomic.Int64
	// cut ends a connection 1.5-4.5 s after it began (a reset or a plain
	// close, both sides), while cutting is on, at most 1,000 in all.
	cut := func(c, s net.Conn, ended <-chan struct{}) {
		timer := time.NewTimer(1500*time.Millisecond + rand.N(3*time.Second))
		defer timer.Stop()
		select {
		case <-ended:
			return
		case <-timer.C:
		}
		if !cutting.Load() || cuts.Add(1) > 1000 {
			return
		}
		rst := rand.N(2) == 0
		for _, conn := range []net.Conn{c, s} {
			if tc, ok := conn.(*net.TCPConn); ok && rst {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
		}
	}
	lb.tap(func(h []byte) {
		if len(h) == 0 {
			return // closed before it sent anything: no reconnect to count
		}
		line, _, _ := strings.Cut(string(h), "\r\n")
		mu.Lock()
		res.paths = append(res.paths, line)
		res.pathsAt = append(res.pathsAt, time.Now())
		mu.Unlock()
	}, cut)

	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "node", "resume.js", "--host", lb.Addr(), "--key", e2eAppKey,
		"--pusher", strconv.Itoa(resumePusherJS), "--echo", strconv.Itoa(resumeEcho),
		"--channels", strings.Join(channels, ","), "--max-seconds", strconv.Itoa(int(publishFor.Seconds())+90))
	cmd.Dir = compat
	stdin, err := cmd.StdinPipe()
	require.NoError(tb, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(tb, err)
	stderr := &proctest.Buffer{}
	cmd.Stderr = stderr
	require.NoError(tb, cmd.Start())
	log := &resumeLog{ready: make(chan struct{}), seqs: map[[2]string][]int{}, subs: map[string][]int64{}}
	read := make(chan struct{})
	go func() { log.read(bufio.NewScanner(stdout)); close(read) }()
	stopClients := func() {
		_ = stdin.Close() // resume.js disconnects and exits
		select {
		case <-read:
		case <-time.After(10 * time.Second):
			cancel()
			<-read
		}
		_ = cmd.Wait()
	}
	tb.Cleanup(stopClients) // a second Close and Wait are no-ops
	started := time.Now()
	select {
	case <-log.ready:
		tb.Logf("%d clients subscribed in %v", resumePusherJS+resumeEcho, time.Since(started).Round(time.Millisecond))
	case <-read: // resume.js gave up (its --ready-seconds) or failed
		tb.Fatalf("resume.js exited before its clients all subscribed; stderr:\n%s", stderr.String())
	case <-time.After(40 * time.Second):
		tb.Fatalf("resume.js clients never all subscribed; stderr:\n%s", stderr.String())
	}

	// The publisher: one batch a tick, a sequence number per channel.
	published := map[int]bool{}
	last := 0
	pubDone := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(pubDone)
		tick := time.NewTicker(time.Second / resumeRate)
		defer tick.Stop()
		for seq := 1; time.Since(began) < publishFor; seq++ {
			<-tick.C
			batch := make([]pusher.Event, 0, len(channels))
			for _, ch := range channels {
				batch = append(batch, pusher.Event{Channel: ch, Name: "seq", Data: map[string]int{"seq": seq}})
			}
			if _, err := api.TriggerBatch(batch); err == nil {
				published[seq] = true
			}
			last = seq
		}
	}()

	// The faults, at fixed points of the run: cuts from the start to 80%,
	// ws-a SIGKILLed at 30% (ws-a2 takes its place), ws-b drained at 55%.
	cutting.Store(true)
	at := func(frac float64) { time.Sleep(time.Until(began.Add(time.Duration(frac * float64(publishFor))))) }
	at(0.3)
	lb.remove(a.addr)
	a.p.kill(tb)
	a2 := startWSNode(tb, "ws-a2", common...)
	waitReady(tb, a2.p, a2.admin)
	lb.add(a2.addr)
	at(0.55)
	drainNode(tb, lb, b)
	at(0.8)
	cutting.Store(false)
	<-pubDone

	// Every client should catch up with the last event once it is
	// connected again; one that does not within 15 s loses the tail.
	ended := time.Now()
	for deadline := ended.Add(15 * time.Second); !log.caughtUp(last) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	tb.Logf("publishing ended; the clients caught up (or gave up) %v later", time.Since(ended).Round(time.Millisecond))
	stopClients()

	log.mu.Lock()
	defer log.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	res.published = len(published) * len(channels)
	res.cuts = int(min(cuts.Load(), 1000))
	res.reconnects = len(res.paths) - (resumePusherJS + resumeEcho)
	res.failed = log.failed
	res.toLive = reconnectToLive(res.paths, res.pathsAt, log.subs, len(channels))
	var keys [][2]string
	for i := range resumePusherJS + resumeEcho {
		name := "js-" + strconv.Itoa(i)
		if i >= resumePusherJS {
			name = "echo-" + strconv.Itoa(i-resumePusherJS)
		}
		for _, ch := range channels {
			keys = append(keys, [2]string{name, ch})
		}
	}
	for _, k := range keys {
		seqs := log.seqs[k]
		got := map[int]bool{}
		prev := 0
		for _, s := range seqs {
			switch {
			case got[s]:
				res.dups++
				continue
			case s < prev:
				res.disorder = append(res.disorder, fmt.Sprintf("%s on %s: %d after %d", k[0], k[1], s, prev))
			}
			got[s], prev = true, s
		}
		first := 1 // a client that got nothing was due everything
		if len(seqs) > 0 {
			first = seqs[0]
		}
		for s := first; s <= last; s++ {
			if published[s] {
				res.expected++
				if !got[s] {
					res.lost++
					if len(res.missing) < 20 {
						res.missing = append(res.missing, fmt.Sprintf("%s %s %d", k[0], k[1], s))
					}
				}
			}
		}
	}
	return res
}

// reconnectToLive pairs each connection of a client past its first (its
// request line names the client: "GET /r/<client>-<pid>-<random>/app/...")
// with the client's subscription_succeeded that followed it on its last
// channel, and returns the times between, sorted.
func reconnectToLive(paths []string, at []time.Time, subs map[string][]int64, channels int) []time.Duration {
	var out []time.Duration
	seen := map[string]bool{}
	for i, p := range paths {
		rest, ok := strings.CutPrefix(p, "GET /r/")
		if !ok {
			continue
		}
		parts := strings.SplitN(rest, "-", 3)
		if len(parts) < 3 {
			continue
		}
		client := parts[0] + "-" + parts[1]
		if !seen[client] {
			seen[client] = true // its first connection: not a reconnect
			continue
		}
		from := at[i].UnixMilli()
		n := 0
		for _, ms := range subs[client] {
			if ms < from {
				continue
			}
			if n++; n == channels {
				out = append(out, time.Duration(ms-from)*time.Millisecond)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
