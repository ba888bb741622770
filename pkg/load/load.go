package load

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/wsclient"
)

// pingEvery keeps held sockets alive past the server's activity timeout.
const pingEvery = 60 * time.Second

type run struct {
	cfg     Config
	http    *http.Client
	dialers []*net.Dialer

	opened, connErr, subErr, dropped, published, churned, subscribed atomic.Int64
	delivered                                                        atomic.Int64 // events read, sampled or not

	mu                         sync.Mutex
	connect, counted, delivery []time.Duration
	probes                     chan probe

	socksMu sync.Mutex
	socks   []*sock
}

type sock struct {
	c      *wsclient.Conn
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
	measureCPU := len(cfg.Admin)+len(cfg.PIDs) > 0
	if measureCPU {
		spent := map[string]float64{}
		sum.RampCPUSeconds = spent
		if n := r.subscribed.Load(); n > 0 {
			sum.RampCPUPerSocketMs = cpuSince(r.cpu(ctx), cpuBefore, spent) * 1000 / float64(n)
		}
	}
	if cfg.API != "" {
		if took, ok := r.waitCounted(ctx, start, int64(cfg.Sockets)); ok {
			sum.CountedAllSeconds = took.Seconds()
		}
	}

	// Hold: churn and publish.
	var holdBefore map[string]float64
	deliveredBefore := r.delivered.Load()
	toolHoldBefore := processCPU()
	if measureCPU {
		holdBefore = r.cpu(ctx)
	}
	restoreCollector, collectionsBefore := collectLate(), collections()
	defer restoreCollector()
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
	sum.ToolCollections = collections() - collectionsBefore
	restoreCollector()
	if n := r.delivered.Load() - deliveredBefore; n > 0 {
		sum.ToolCPUPerDeliveryUs = (processCPU() - toolHoldBefore).Seconds() * 1e6 / float64(n)
		if measureCPU {
			sum.HoldCPUPerDeliveryUs = cpuSince(r.cpu(ctx), holdBefore, nil) * 1e6 / float64(n)
		}
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
	c, err := wsclient.DialWith(r.dialers[i%len(r.dialers)], r.cfg.WS[i%len(r.cfg.WS)], "/app/"+r.cfg.Key+"?protocol=7&client=hcload&version=1")
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
				r.delivered.Add(1)
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
