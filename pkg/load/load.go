package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/wstest"
)

// Limits that keep a run bounded.
const (
	MaxSockets  = 200_000
	MaxDuration = time.Hour
	// pingEvery keeps held sockets alive past the server's activity timeout.
	pingEvery = 60 * time.Second
)

// Config is one load scenario.
type Config struct {
	WS                 []string // wsnode host:port, sockets spread round-robin
	API                string   // httpapi host:port; empty: no counted/publish measures
	AppID, Key, Secret string
	Sockets            int           // sockets to hold
	ConnectRate        int           // new sockets per second during the ramp; 0: as fast as Concurrency allows
	Concurrency        int           // dials in flight (default 256)
	Hold               time.Duration // how long to hold (churning, publishing) after the ramp
	HotChannels        int           // default 1
	ColdChannels       int           // default 400 (with at most 1,000 load channels, counted-all is measured)
	HotShare           float64       // share of sockets on hot channels (default 0.1)
	PresenceShare      float64       // share of sockets on presence channels (default 0)
	ChurnRate          float64       // sockets closed and reopened per second while holding
	PublishRate        float64       // events per second to the hot channels while holding
	SourceIPs          int           // spread over this many 127.0.0.x source addresses (default 1: the kernel's choice)
	ProbeEvery         int           // every Nth socket measures subscribe-to-counted (0: default 100; negative: off)
	Progress           io.Writer     // one line per second; nil: none
	// Admin lists admin host:ports of server processes (wsnodes, httpapi,
	// cleaners) whose process_cpu_seconds_total is read before and after
	// the ramp, to report their CPU cost per accepted socket.
	Admin []string
	// PIDs lists local server processes (any server, not only headcount's)
	// whose CPU time is read from /proc before and after the ramp and
	// added to RampCPUSeconds and RampCPUPerSocketMs as Admin's are.
	PIDs []int
}

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 256
	}
	if c.HotChannels <= 0 {
		c.HotChannels = 1
	}
	if c.ColdChannels <= 0 {
		c.ColdChannels = 400
	}
	if c.HotShare == 0 {
		c.HotShare = 0.1
	}
	if c.ProbeEvery == 0 {
		c.ProbeEvery = 100
	}
	if c.SourceIPs <= 0 {
		c.SourceIPs = 1
	}
}

// Validate checks the bounds and that every target is on loopback.
func (c *Config) Validate() error {
	var errs []error
	if len(c.WS) == 0 {
		errs = append(errs, errors.New("no wsnode address"))
	}
	for _, a := range append(append(slices.Clone(c.WS), c.API), c.Admin...) {
		if a == "" {
			continue
		}
		if err := loopback(a); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Sockets < 1 || c.Sockets > MaxSockets {
		errs = append(errs, fmt.Errorf("sockets must be 1..%d, not %d", MaxSockets, c.Sockets))
	}
	if c.Hold < 0 || c.Hold > MaxDuration {
		errs = append(errs, fmt.Errorf("hold must be 0..%v, not %v", MaxDuration, c.Hold))
	}
	if c.HotShare < 0 || c.HotShare > 1 || c.PresenceShare < 0 || c.PresenceShare > 1 || c.HotShare+c.PresenceShare > 1 {
		errs = append(errs, errors.New("hot and presence shares must be within 0..1 and sum to at most 1"))
	}
	if c.SourceIPs > 250*250 {
		errs = append(errs, errors.New("at most 62,500 source addresses"))
	}
	if c.AppID == "" || c.Key == "" || c.Secret == "" {
		errs = append(errs, errors.New("app id, key and secret are required"))
	}
	return errors.Join(errs...)
}

func loopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", hostport, err)
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return fmt.Errorf("%q: %w", hostport, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() || ip.To4() == nil {
			return fmt.Errorf("%q resolves to %v: the load tool targets 127.0.0.0/8 only", hostport, ip)
		}
	}
	return nil
}

// Percentiles summarizes a set of durations in milliseconds.
type Percentiles struct {
	N                  int     `json:"n"`
	P50, P90, P99, Max float64 `json:"-"`
}

// MarshalJSON names the fields as the report reads them.
func (p Percentiles) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"n": p.N, "p50_ms": p.P50, "p90_ms": p.P90, "p99_ms": p.P99, "max_ms": p.Max})
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))]) / float64(time.Millisecond) }
	return Percentiles{N: len(d), P50: at(.5), P90: at(.9), P99: at(.99), Max: at(1)}
}

// Summary is a run's outcome.
type Summary struct {
	Sockets         int     `json:"sockets"`
	Opened          int64   `json:"opened"`
	ConnectErrors   int64   `json:"connect_errors"`
	SubscribeErrors int64   `json:"subscribe_errors"`
	Dropped         int64   `json:"dropped"` // closed by the server or the network while held
	RampSeconds     float64 `json:"ramp_seconds"`
	// AcceptedPerSecond: sockets subscribed per second during the ramp.
	AcceptedPerSecond float64 `json:"accepted_per_second"`
	// CountedAllSeconds: from the first dial until the HTTP API counted
	// every subscription (0 if not within 60 s, no API, or more than 1,000
	// load channels).
	CountedAllSeconds float64     `json:"counted_all_seconds"`
	Connect           Percentiles `json:"connect"`
	Counted           Percentiles `json:"subscribe_to_counted"`
	Delivery          Percentiles `json:"publish_to_delivery"`
	Published         int64       `json:"published"`
	Churned           int64       `json:"churned"`
	// RampCPUSeconds is each Admin process's CPU time during the ramp, and
	// RampCPUPerSocketMs their sum per socket accepted.
	RampCPUSeconds     map[string]float64 `json:"ramp_cpu_seconds,omitempty"`
	RampCPUPerSocketMs float64            `json:"ramp_cpu_per_socket_ms,omitempty"`
	// ToolCPUPerSocketMs is this process's own CPU time during the ramp per
	// socket accepted: on a shared machine, what the load cost the servers.
	ToolCPUPerSocketMs float64 `json:"tool_cpu_per_socket_ms,omitempty"`
}

type run struct {
	cfg     Config
	http    *http.Client
	dialers []*net.Dialer

	opened, connErr, subErr, dropped, published, churned, subscribed atomic.Int64

	mu                         sync.Mutex
	connect, counted, delivery []time.Duration
	probes                     chan probe

	socksMu sync.Mutex
	socks   []*sock
}

type sock struct {
	c      *wstest.Conn
	closed atomic.Bool
}

type probe struct {
	channel string
	sent    time.Time
}

// Run runs the scenario and returns its summary.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	r := &run{cfg: cfg, http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
		probes: make(chan probe, 4096)}
	for i := range cfg.SourceIPs {
		// No TCP keepalive: the sockets ping as pusher-js does.
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}
		if cfg.SourceIPs > 1 {
			d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, byte(i/250), byte(1+i%250))}
			d.Control = bindNoPort
		}
		r.dialers = append(r.dialers, d)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	if cfg.API != "" && cfg.ProbeEvery > 0 {
		bg.Go(func() { r.prober(ctx) })
	}
	stopProgress := r.progress(ctx)
	defer stopProgress()

	// Ramp.
	cpuBefore, toolBefore := r.cpu(ctx), processCPU()
	start := time.Now()
	var ramp sync.WaitGroup
	slots := make(chan struct{}, cfg.Concurrency)
	for i := range cfg.Sockets {
		if cfg.ConnectRate > 0 {
			// Socket i is due at start + i/rate. Sleeping only when a
			// millisecond ahead dials in small batches and holds the rate
			// on average (a ticker at 2,000/s dropped a third of its ticks).
			due := start.Add(time.Duration(i) * time.Second / time.Duration(cfg.ConnectRate))
			if d := time.Until(due); d > time.Millisecond {
				clock.Sleep(ctx, d)
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		// One goroutine per socket: it opens the socket, frees its dial
		// slot, then reads the socket until it closes.
		ramp.Add(1)
		bg.Go(func() {
			s := r.open(i)
			<-slots
			ramp.Done()
			if s != nil {
				r.read(ctx, s)
			}
		})
	}
	ramp.Wait()
	rampTook := time.Since(start)
	sum := Summary{Sockets: cfg.Sockets, RampSeconds: rampTook.Seconds()}
	sum.AcceptedPerSecond = float64(r.subscribed.Load()) / rampTook.Seconds()
	if n := r.subscribed.Load(); n > 0 {
		sum.ToolCPUPerSocketMs = (processCPU() - toolBefore).Seconds() * 1000 / float64(n)
	}
	if len(cfg.Admin)+len(cfg.PIDs) > 0 {
		after, total := r.cpu(ctx), 0.0
		sum.RampCPUSeconds = map[string]float64{}
		for a, v := range after {
			sum.RampCPUSeconds[a] = v - cpuBefore[a]
			total += v - cpuBefore[a]
		}
		if n := r.subscribed.Load(); n > 0 {
			sum.RampCPUPerSocketMs = total * 1000 / float64(n)
		}
	}
	if cfg.API != "" {
		if took, ok := r.waitCounted(ctx, start, int64(cfg.Sockets)); ok {
			sum.CountedAllSeconds = took.Seconds()
		}
	}

	// Hold: churn and publish.
	holdCtx, holdCancel := context.WithTimeout(ctx, cfg.Hold)
	var hold sync.WaitGroup
	if cfg.ChurnRate > 0 {
		hold.Go(func() { r.churn(holdCtx, &bg) })
	}
	if cfg.PublishRate > 0 && cfg.API != "" {
		hold.Go(func() { r.publish(holdCtx) })
	}
	<-holdCtx.Done()
	holdCancel()
	hold.Wait()
	if cfg.PublishRate > 0 {
		clock.Sleep(ctx, time.Second) // the last events' deliveries
	}
	cancel()
	r.closeAll()
	bg.Wait()

	sum.Opened, sum.ConnectErrors, sum.SubscribeErrors = r.opened.Load(), r.connErr.Load(), r.subErr.Load()
	sum.Dropped, sum.Published, sum.Churned = r.dropped.Load(), r.published.Load(), r.churned.Load()
	r.mu.Lock()
	sum.Connect, sum.Counted, sum.Delivery = percentiles(r.connect), percentiles(r.counted), percentiles(r.delivery)
	r.mu.Unlock()
	return sum, nil
}

// channelOf is socket i's channel: hot, presence or cold.
func (r *run) channelOf(i int) (ch string, presence bool) {
	x := float64(i%1000) / 1000
	switch {
	case x < r.cfg.HotShare:
		return "load-hot-" + strconv.Itoa(i%r.cfg.HotChannels), false
	case x < r.cfg.HotShare+r.cfg.PresenceShare:
		return "presence-load-" + strconv.Itoa(i%r.cfg.ColdChannels), true
	default:
		return "load-cold-" + strconv.Itoa(i%r.cfg.ColdChannels), false
	}
}

// open dials socket i, subscribes it and registers it; the caller reads it.
// It returns nil if the socket failed (counted).
func (r *run) open(i int) *sock {
	t0 := time.Now()
	c, err := wstest.DialWith(r.dialers[i%len(r.dialers)], r.cfg.WS[i%len(r.cfg.WS)], "/app/"+r.cfg.Key+"?protocol=7&client=hcload&version=1")
	if err != nil {
		r.connErr.Add(1)
		return nil
	}
	f, err := c.Read(10 * time.Second)
	if err != nil || !strings.Contains(f, "pusher:connection_established") {
		r.connErr.Add(1)
		c.Close()
		return nil
	}
	connected := time.Since(t0)
	socketID := field(f, "socket_id")
	r.opened.Add(1)
	ch, presence := r.channelOf(i)
	if err := c.Send(r.subscribeFrame(socketID, ch, presence, i)); err != nil {
		r.subErr.Add(1)
		c.Close()
		return nil
	}
	if f, err = c.Read(10 * time.Second); err != nil || !strings.Contains(f, "subscription_succeeded") {
		r.subErr.Add(1)
		c.Close()
		return nil
	}
	r.subscribed.Add(1)
	r.mu.Lock()
	r.connect = append(r.connect, connected)
	r.mu.Unlock()
	if r.cfg.ProbeEvery > 0 && r.cfg.API != "" && i%r.cfg.ProbeEvery == 0 {
		probeCh := "load-probe-" + strconv.Itoa(i) + "-" + strconv.FormatUint(rand.Uint64(), 36)
		sent := time.Now()
		if c.Send(r.subscribeFrame(socketID, probeCh, false, i)) == nil {
			select {
			case r.probes <- probe{probeCh, sent}:
			default:
			}
		}
	}
	s := &sock{c: c}
	r.socksMu.Lock()
	r.socks = append(r.socks, s)
	r.socksMu.Unlock()
	return s
}

func (r *run) subscribeFrame(socketID, ch string, presence bool, i int) string {
	if !presence {
		return `{"event":"pusher:subscribe","data":{"channel":"` + ch + `"}}`
	}
	cd := `{"user_id":"load-` + strconv.Itoa(i) + `"}`
	sig := r.cfg.Key + ":" + auth.Sign(r.cfg.Secret, auth.ChannelAuthString(socketID, ch, cd))
	b, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": ch, "auth": sig, "channel_data": cd}})
	return string(b)
}

// read records deliveries until the socket closes.
func (r *run) read(ctx context.Context, s *sock) {
	for {
		f, err := s.c.Read(pingEvery)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil && !s.closed.Load() {
				if s.c.Send(`{"event":"pusher:ping","data":{}}`) == nil {
					continue
				}
			}
			if !s.closed.Load() && ctx.Err() == nil {
				r.dropped.Add(1)
			}
			return
		}
		if strings.Contains(f, `"event":"load"`) {
			if sent, err := strconv.ParseInt(field(f, "sent"), 10, 64); err == nil {
				d := time.Since(time.Unix(0, sent))
				r.mu.Lock()
				if len(r.delivery) < 2_000_000 {
					r.delivery = append(r.delivery, d)
				}
				r.mu.Unlock()
			}
		}
	}
}

// field pulls "name":"value" or "name":value out of a frame, whose data
// may be a JSON string with escaped quotes.
func field(frame, name string) string {
	f := strings.ReplaceAll(frame, `\"`, `"`)
	i := strings.Index(f, `"`+name+`":`)
	if i < 0 {
		return ""
	}
	rest := strings.TrimLeft(f[i+len(name)+3:], `"`)
	end := strings.IndexAny(rest, `",}`)
	if end < 0 {
		return rest
	}
	return rest[:end]
}

func (r *run) closeAll() {
	r.socksMu.Lock()
	defer r.socksMu.Unlock()
	for _, s := range r.socks {
		s.closed.Store(true)
		s.c.Close()
	}
}

// churn closes a random held socket and opens a new one, ChurnRate times a second.
func (r *run) churn(ctx context.Context, bg *sync.WaitGroup) {
	t := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.ChurnRate))
	defer t.Stop()
	next := r.cfg.Sockets
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.socksMu.Lock()
		if n := len(r.socks); n > 0 {
			j := rand.N(n)
			s := r.socks[j]
			r.socks[j] = r.socks[n-1]
			r.socks = r.socks[:n-1]
			s.closed.Store(true)
			s.c.Close()
		}
		r.socksMu.Unlock()
		r.churned.Add(1)
		i := next
		next++
		bg.Go(func() {
			if s := r.open(i); s != nil {
				r.read(ctx, s)
			}
		})
	}
}

// publish triggers an event on a hot channel PublishRate times a second,
// carrying its send time.
func (r *run) publish(ctx context.Context) {
	t := time.NewTicker(time.Duration(float64(time.Second) / r.cfg.PublishRate))
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, _ := json.Marshal(map[string]string{"sent": strconv.FormatInt(time.Now().UnixNano(), 10)})
		body, _ := json.Marshal(map[string]any{"name": "load", "channel": "load-hot-" + strconv.Itoa(n%r.cfg.HotChannels), "data": string(data)})
		if r.api(ctx, http.MethodPost, "/apps/"+r.cfg.AppID+"/events", nil, body) == nil {
			r.published.Add(1)
		}
	}
}

// api sends a signed request and decodes a JSON answer into out (if any).
func (r *run) api(ctx context.Context, method, path string, query url.Values, body []byte, out ...any) error {
	q := auth.SignRequest(method, path, query, body, r.cfg.Key, r.cfg.Secret, time.Now())
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.cfg.API+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if len(out) > 0 {
		return json.Unmarshal(b, out[0])
	}
	return nil
}

// probeEvery is how often each probe not yet counted is looked up: the
// resolution of subscribe-to-counted.
const probeEvery = 5 * time.Millisecond

// prober measures subscribe-to-counted for probe sockets: every probeEvery
// it looks up each probe not yet counted, so a probe's time never includes
// waiting behind another's (one at a time, a storm's probes queued for
// most of the ramp). A probe not counted within 30 s is dropped.
func (r *run) prober(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	var pending []probe
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-r.probes:
			pending = append(pending, p)
			continue
		case <-t.C:
		}
		kept := pending[:0]
		for _, p := range pending {
			var ans struct {
				Occupied bool `json:"occupied"`
			}
			if r.api(ctx, http.MethodGet, "/apps/"+r.cfg.AppID+"/channels/"+p.channel, nil, nil, &ans) == nil && ans.Occupied {
				r.mu.Lock()
				r.counted = append(r.counted, time.Since(p.sent))
				r.mu.Unlock()
			} else if time.Since(p.sent) < 30*time.Second {
				kept = append(kept, p)
			}
		}
		pending = kept
	}
}

// waitCounted polls the leaderboard (top 1,000 channels with their counts)
// until the load channels add up to want subscriptions (probes aside), for
// at most 60 s. With more than 1,000 load channels it cannot see them all
// and reports false at once.
func (r *run) waitCounted(ctx context.Context, start time.Time, want int64) (time.Duration, bool) {
	if r.channels() > 1000 {
		return 0, false
	}
	deadline := time.Now().Add(60 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		var ans struct {
			Channels map[string]struct {
				SubscriptionCount int64 `json:"subscription_count"`
			} `json:"channels"`
		}
		q := url.Values{"order": {"subscription_count"}, "limit": {"1000"}}
		if r.api(ctx, http.MethodGet, "/apps/"+r.cfg.AppID+"/channels", q, nil, &ans) == nil {
			var sum int64
			for name, c := range ans.Channels {
				if strings.HasPrefix(name, "load-hot-") || strings.HasPrefix(name, "load-cold-") || strings.HasPrefix(name, "presence-load-") {
					sum += c.SubscriptionCount
				}
			}
			if sum >= want-r.connErr.Load()-r.subErr.Load() {
				return time.Since(start), true
			}
		}
		clock.Sleep(ctx, 20*time.Millisecond)
	}
	return 0, false
}

// cpu reads process_cpu_seconds_total from every Admin address and the
// CPU time of every PID, keyed "pid:N".
func (r *run) cpu(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, pid := range r.cfg.PIDs {
		if v, err := pidCPU(pid); err == nil {
			out["pid:"+strconv.Itoa(pid)] = v
		}
	}
	for _, a := range r.cfg.Admin {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := r.http.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				out[a], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		}
	}
	return out
}

// pidCPU is a local process's CPU time in seconds (user + system, from
// /proc/PID/stat; Linux only).
func pidCPU(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is the first, utime the 12th, stime the 13th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return (utime + stime) / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// channels is how many load channels the distribution uses (probes aside).
func (r *run) channels() int {
	n := r.cfg.HotChannels + r.cfg.ColdChannels
	if r.cfg.PresenceShare > 0 {
		n += r.cfg.ColdChannels
	}
	return n
}

// progress prints a line a second until stopped.
func (r *run) progress(ctx context.Context) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.mu.Lock()
			c, d := percentiles(slices.Clone(r.connect)), percentiles(slices.Clone(r.delivery))
			k := percentiles(slices.Clone(r.counted))
			r.mu.Unlock()
			fmt.Fprintf(r.cfg.Progress, "t=%3.0fs open=%d/%d errors=%d dropped=%d connect p99=%.1fms counted p99=%.1fms published=%d delivered=%d p50=%.1fms p99=%.1fms\n",
				time.Since(start).Seconds(), r.subscribed.Load(), r.cfg.Sockets, r.connErr.Load()+r.subErr.Load(), r.dropped.Load(),
				c.P99, k.P99, r.published.Load(), d.N, d.P50, d.P99)
		}
	})
	return func() { close(done); wg.Wait() }
}

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
