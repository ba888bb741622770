package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

var allTypes = eventlog.Names

// receiver is a real HTTP server that validates every request the way
// pusher-http-go v5.1.1 does and records the events; fail decides whether
// to answer 500 to a request (by its event, before validation).
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []string // "name channel [user]"
	errs   []string
	fail   func(ev string) bool
	tries  map[string]int
	client *pusher.Client
}

func newReceiver(t *testing.T, app *apps.App) *receiver {
	r := &receiver{tries: map[string]int{}, client: &pusher.Client{AppID: app.ID, Key: app.Key, Secret: app.Secret}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if ct := req.Header.Get("Content-Type"); ct != "application/json" {
			r.errs = append(r.errs, "content type "+ct)
		}
		hook, err := r.client.Webhook(req.Header, body)
		if err != nil || len(hook.Events) != 1 || hook.TimeMs == 0 {
			r.errs = append(r.errs, fmt.Sprintf("invalid webhook %s: %v", body, err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		e := hook.Events[0]
		line := strings.TrimSpace(e.Name + " " + e.Channel + " " + e.UserID)
		switch e.Name {
		case ClientEvent:
			line = e.Name + " " + e.Channel + " " + e.Event + " " + e.Data + " " + e.SocketID
		case SubscriptionCount, EventsDropped:
			// pusher-http-go has no field for these: read the body's.
			var raw struct{ Events []Event }
			if err := json.Unmarshal(body, &raw); err != nil || len(raw.Events) != 1 {
				r.errs = append(r.errs, fmt.Sprintf("invalid webhook %s: %v", body, err))
			} else if c := raw.Events[0].SubscriptionCount; c != nil {
				line += " " + strconv.FormatInt(*c, 10)
			} else if d := raw.Events[0].Dropped; d != nil {
				line += " " + strconv.FormatInt(*d, 10)
			}
		}
		r.tries[line]++
		if r.fail != nil && r.fail(line) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		r.got = append(r.got, line)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r.mu.Lock()
		got, errs := slices.Clone(r.got), slices.Clone(r.errs)
		r.mu.Unlock()
		require.Empty(t, errs)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d events: %v", len(got), n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type fixture struct {
	rdb redis.UniversalClient
	app *apps.App
	reg *apps.Registry
	rcv *receiver
}

func newFixture(t *testing.T, rdb redis.UniversalClient) *fixture {
	app := &apps.App{ID: "app-1", Key: "key-1", Secret: "secret-1", Enabled: true}
	f := &fixture{rdb: rdb, app: app, rcv: newReceiver(t, app)}
	app.Webhooks = []apps.Webhook{{URL: f.rcv.URL + "/hook", EventTypes: allTypes}}
	reg, err := apps.New([]*apps.App{app})
	require.NoError(t, err)
	f.reg = reg
	return f
}

// start runs a deliverer named replica until the returned stop is called
// (or the test ends).
func (f *fixture) start(t *testing.T, replica string, opts Options) (stop func(), reg *prometheus.Registry) {
	reg = prometheus.NewRegistry()
	opts.Apps, opts.Replica, opts.Logger, opts.Registerer = f.reg, replica, logging.TestLogger(t), reg
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = 300 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = New(f.rdb, opts).Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop, reg
}

func (f *fixture) append(t *testing.T, evs ...Event) {
	t.Helper()
	_, err := Append(context.Background(), f.rdb, keyspace.Space{}, f.app, evs...)
	require.NoError(t, err)
}

// recorder is a node's counts recorder that logs the fixture app's
// changes as its webhooks ask (as a wsnode's does).
func (f *fixture) recorder(t *testing.T, node string) *counts.Recorder {
	return counts.NewRecorder(f.rdb, node, counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t),
		LogEvents: func(string) eventlog.Spec { return LogSpec(f.app) }})
}

// TestDelivery: events appended to the log (and written by the count
// scripts themselves) reach the receiver signed as Pusher signs them, in
// order within a channel.
func TestDelivery(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb)
		_, reg := f.start(t, "r1", Options{})
		n := int64(3)
		f.append(t,
			Event{Name: ClientEvent, Channel: "private-a", Event: "client-typing", Data: `{"x":1}`, SocketID: "1.2"},
			Event{Name: SubscriptionCount, Channel: "news", SubscriptionCount: &n},
		)
		// The count scripts' own events, in the same unit as the counts.
		rec := f.recorder(t, "n1")
		rec.Add(f.app.ID, "presence-r", 1)
		rec.AddMember(f.app.ID, "presence-r", "u1", []byte(`{}`), 1)
		require.NoError(t, rec.Flush(context.Background()))
		got := f.rcv.waitFor(t, 4)
		require.Less(t, slices.Index(got, "channel_occupied presence-r"), slices.Index(got, "member_added presence-r u1"), "order within a channel")
		slices.Sort(got)
		require.Equal(t, []string{
			"channel_occupied presence-r",
			`client_event private-a client-typing {"x":1} 1.2`,
			"member_added presence-r u1",
			"subscription_count news 3",
		}, got)
		require.Eventually(t, func() bool { return summed(t, reg, "headcount_webhook_sent_total") == 4 }, 5*time.Second, 10*time.Millisecond)
	})
}

// TestCacheMissDelivered: a cache_miss a wsnode queues on its Producer
// reaches the receiver as Pusher sends it, {"name":"cache_miss","channel":..}.
func TestCacheMissDelivered(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	f := newFixture(t, rdb)
	f.start(t, "r1", Options{})
	p := NewProducer(rdb, keyspace.Space{}, logging.TestLogger(t), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	p.Enqueue(f.app, Event{Name: CacheMiss, Channel: "cache-x"})
	require.Equal(t, []string{"cache_miss cache-x"}, f.rcv.waitFor(t, 1))
}

// summed is the sum of name's series in reg, whatever their labels; 0
// before any is touched.
func summed(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	f, err := metricstest.Gather(reg)
	require.NoError(t, err)
	v, _ := f.Sum(name)
	return v
}

// TestRetries: a receiver that fails its first 3 attempts at each event
// still gets every event, once, in order per channel.
func TestRetries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.New(t).Client(t))
	f.rcv.fail = func(line string) bool { return f.rcv.tries[line] <= 3 }
	f.start(t, "r1", Options{})
	f.append(t, Event{Name: ChannelOccupied, Channel: "a"}, Event{Name: MemberAdded, Channel: "a", UserID: "u"}, Event{Name: ChannelOccupied, Channel: "b"})
	got := f.rcv.waitFor(t, 3)
	require.Len(t, got, 3)
	require.Less(t, slices.Index(got, "channel_occupied a"), slices.Index(got, "member_added a u"), "order within a channel")
	for line, n := range f.rcv.tries {
		require.Equal(t, 4, n, line)
	}
}

// TestDebounce: a vacated channel that is occupied again within the
// debounce (a page reload) sends nothing; one that stays empty is sent
// after the debounce.
func TestDebounce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.New(t).Client(t))
	const debounce = 400 * time.Millisecond
	f.start(t, "r1", Options{Debounce: debounce})
	rec := f.recorder(t, "n1")
	flush := func() { require.NoError(t, rec.Flush(context.Background())) }
	rec.Add(f.app.ID, "presence-reload", 1)
	rec.AddMember(f.app.ID, "presence-reload", "u", []byte(`{}`), 1)
	rec.Add(f.app.ID, "gone", 1)
	flush()
	got := f.rcv.waitFor(t, 4)
	slices.Sort(got)
	require.Equal(t, []string{"channel_occupied gone", "channel_occupied presence-reload", "member_added presence-reload u", "subscription_count gone 1"}, got)

	start := time.Now()
	rec.Add(f.app.ID, "presence-reload", -1)
	rec.AddMember(f.app.ID, "presence-reload", "u", nil, -1)
	rec.Add(f.app.ID, "gone", -1)
	flush()
	rec.Add(f.app.ID, "presence-reload", 1)
	rec.AddMember(f.app.ID, "presence-reload", "u", []byte(`{}`), 1)
	flush()
	got = f.rcv.waitFor(t, 5)
	require.GreaterOrEqual(t, time.Since(start), debounce, "vacated was sent before the debounce ended")
	require.Equal(t, "channel_vacated gone", got[4])
	// Nothing else comes: the reload's four changes cancelled out.
	rec.Add(f.app.ID, "marker", 1)
	flush()
	require.Equal(t, "channel_occupied marker", f.rcv.waitFor(t, 6)[5])
}

// TestTakeover: a replica that read events and died before delivering them
// (its receiver was failing) loses nothing: another replica takes its lease,
// claims what it read, and delivers.
func TestTakeover(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := newFixture(t, rdb)
		var failing sync.Map
		failing.Store("on", true)
		f.rcv.fail = func(string) bool { _, on := failing.Load("on"); return on }
		stopA, regA := f.start(t, "a", Options{})
		f.append(t, Event{Name: ChannelOccupied, Channel: "x"}, Event{Name: ChannelOccupied, Channel: "y"})
		require.Eventually(t, func() bool { return summed(t, regA, "headcount_webhook_failed_total") >= 2 }, 10*time.Second, 10*time.Millisecond)
		stopA()
		failing.Delete("on")
		f.start(t, "b", Options{})
		got := f.rcv.waitFor(t, 2)
		slices.Sort(got)
		require.Equal(t, []string{"channel_occupied x", "channel_occupied y"}, got)
	})
}

// TestTrim: the part of the log every webhook has finished is trimmed, so
// the log cannot grow without bound while deliveries keep up.
func TestTrim(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.New(t).Client(t))
	f.start(t, "r1", Options{TrimEvery: 50 * time.Millisecond})
	for i := range 20 {
		f.append(t, Event{Name: ChannelOccupied, Channel: fmt.Sprint("c", i)})
	}
	f.rcv.waitFor(t, 20)
	require.Eventually(t, func() bool {
		n, err := f.rdb.XLen(context.Background(), eventlog.Key(keyspace.Space{}, f.app.ID)).Result()
		return err == nil && n <= 1
	}, 5*time.Second, 20*time.Millisecond, "the delivered log was never trimmed")
}

// TestGiveUp: past the retry window an event is dropped, counted and
// logged, and the ones after it are delivered.
func TestGiveUp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.New(t).Client(t))
	f.rcv.fail = func(line string) bool { return line == "channel_occupied doomed" }
	_, reg := f.start(t, "r1", Options{RetryWindow: 700 * time.Millisecond})
	f.append(t, Event{Name: ChannelOccupied, Channel: "doomed"}, Event{Name: MemberAdded, Channel: "doomed", UserID: "u"})
	require.Equal(t, []string{"member_added doomed u"}, f.rcv.waitFor(t, 1))
	require.Equal(t, 1.0, summed(t, reg, "headcount_webhook_dropped_total"))
}

// TestRedirectNotFollowed: a receiver that redirects does not get the
// deliverer to post anywhere else (the Location could be an internal
// address). The attempt fails and is retried like any non-2xx, an operator
// sees the Location in one warning, and past the retry window the event is
// given up. This holds for a caller's own client too, whose default is to
// follow redirects.
func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client *http.Client
	}{
		{name: "default client"},
		{name: "caller's client", client: &http.Client{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.New(t).Client(t)
			var inside, redirects sync.Map // request paths
			internal := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
				inside.Store(req.URL.Path, true)
			}))
			t.Cleanup(internal.Close)
			redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				redirects.Store(req.URL.Path, true)
				// 307 keeps the method and body: the strongest case.
				http.Redirect(w, req, internal.URL+"/admin", http.StatusTemporaryRedirect)
			}))
			t.Cleanup(redirector.Close)

			app := &apps.App{ID: "app-1", Key: "key-1", Secret: "secret-1", Enabled: true,
				Webhooks: []apps.Webhook{{URL: redirector.URL + "/hook", EventTypes: allTypes}}}
			reg, err := apps.New([]*apps.App{app})
			require.NoError(t, err)
			var logs proctest.Buffer
			metrics := prometheus.NewRegistry()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			d := New(rdb, Options{Apps: reg, Replica: "r1", Registerer: metrics, Client: tc.client,
				Logger:   hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}),
				LeaseTTL: 300 * time.Millisecond, RetryWindow: 1500 * time.Millisecond})
			go func() { _ = d.Run(ctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })

			_, err = Append(context.Background(), rdb, keyspace.Space{}, app, Event{Name: ChannelOccupied, Channel: "a"})
			require.NoError(t, err)
			sent := func() float64 { return summed(t, metrics, "headcount_webhook_sent_total") }
			require.Eventually(t, func() bool {
				return summed(t, metrics, "headcount_webhook_dropped_total") == 1 || sent() > 0
			}, 10*time.Second, 10*time.Millisecond, "the redirected event was never given up")

			_, hit := redirects.Load("/hook")
			require.True(t, hit, "the receiver was never asked")
			inside.Range(func(k, _ any) bool { t.Errorf("the redirect target got a request for %v", k); return true })
			require.Equal(t, 0.0, sent(), "a redirected post counted as delivered")
			failed := summed(t, metrics, "headcount_webhook_failed_total")
			require.GreaterOrEqual(t, failed, 2.0, "a redirect is retried like any failure")
			require.Equal(t, failed-1, summed(t, metrics, "headcount_webhook_retried_total"))

			out := logs.String()
			require.Equal(t, 1, strings.Count(out, "webhook receiver redirects"), "one warning, not one per attempt:\n%s", out)
			require.Contains(t, out, "location="+internal.URL+"/admin")
			require.Contains(t, out, "webhook event given up after the retry window")
			if tc.client != nil {
				require.Nil(t, tc.client.CheckRedirect, "the caller's client was changed")
			}
		})
	}
}

// TestLogBudget: with nothing delivering (a failing webhook whose
// deliverer is down), two nodes' producers flooding 10 KB client events
// fill the app's event log only up to its byte budget. The rest are
// counted as log_full drops with one warning per producer, not one per
// event. Every other event is held to the budget too: the count scripts'
// markers and admission events are refused and counted in the log; once a
// deliverer frees room, the receivers that ask for events_dropped learn
// how many went missing, and the deliverer reports the count.
func TestLogBudget(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		f := newFixture(t, rdb)
		app := f.app
		app.MaxWebhookLogSizeInMb = 0.25
		budget := LogBudget(app)
		require.EqualValues(t, 256<<10, budget)

		type node struct {
			p    *Producer
			reg  *prometheus.Registry
			logs *proctest.Buffer
		}
		var nodes []node
		for range 2 {
			n := node{reg: prometheus.NewRegistry(), logs: &proctest.Buffer{}}
			n.p = NewProducer(rdb, keyspace.Space{}, hclog.New(&hclog.LoggerOptions{Output: n.logs, Level: hclog.Info}), n.reg)
			pctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { n.p.Run(pctx); close(done) }()
			t.Cleanup(func() { cancel(); <-done })
			nodes = append(nodes, n)
		}
		const flood = 100 // 1 MB: four times the budget
		data := strings.Repeat("x", 10<<10)
		for i := range flood {
			nodes[i%2].p.Enqueue(app, Event{Name: ClientEvent, Channel: "private-a", Event: "client-big", Data: data, SocketID: fmt.Sprint("1.", i)})
		}
		refused := func() float64 {
			sum := 0.0
			for _, n := range nodes {
				sum += summed(t, n.reg, "headcount_webhook_events_dropped_total")
			}
			return sum
		}
		log := eventlog.For(keyspace.Space{}, app.ID)
		xlen := func() int64 {
			n, err := rdb.XLen(ctx, log.Key).Result()
			require.NoError(t, err)
			return n
		}
		require.Eventually(t, func() bool { return float64(xlen())+refused() == flood }, 10*time.Second, 10*time.Millisecond)

		entries, err := rdb.XRange(ctx, log.Key, "-", "+").Result()
		require.NoError(t, err)
		var total, size int64 // size: the largest entry's
		for _, e := range entries {
			n := int64(len(e.Values["t"].(string)) + len(e.Values["ev"].(string)))
			total, size = total+n, max(size, n)
		}
		require.Greater(t, size, int64(10<<10))
		require.LessOrEqual(t, total, budget, "the log went past its budget")
		require.Greater(t, total, budget-size, "the log stopped short of its budget")
		st, err := log.Stats(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, total, st.Bytes)
		require.EqualValues(t, flood-len(entries), refused())
		require.EqualValues(t, flood-len(entries), st.Dropped, "the log counts what it refused")
		for _, n := range nodes {
			drops := summed(t, n.reg, "headcount_webhook_events_dropped_total")
			if drops == 0 {
				continue // the other node's events met the full log
			}
			require.Equal(t, drops, testutil.ToFloat64(n.p.refused.WithLabelValues(app.ID, "log_full")), "every drop is log_full")
			out := n.logs.String()
			require.Equal(t, 1, strings.Count(out, "the app's event log is full"), "one warning, not one per event:\n%s", out)
			require.Contains(t, out, "app=app-1")
		}

		// Fill what is left (an append with no budget, which first tells of
		// the drops so far), then the count scripts' markers and admission
		// events are refused too; the counts change all the same.
		_, _, err = log.Append(ctx, rdb, 0, strings.Repeat("x", int(budget-total)))
		require.NoError(t, err)
		require.Equal(t, int64(len(entries))+2, xlen(), "the notice and the filler")
		rec := f.recorder(t, "n1")
		rec.Add(app.ID, "presence-r", 1)
		rec.AddMember(app.ID, "presence-r", "u1", []byte(`{}`), 1)
		require.NoError(t, rec.Flush(ctx))
		n, err := Append(ctx, rdb, keyspace.Space{}, app, Event{Name: AdmissionAdmitted, Channel: "presence-r", UserID: "u1"})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, int64(len(entries))+2, xlen())
		st, err = log.Stats(ctx, rdb)
		require.NoError(t, err)
		require.EqualValues(t, flood-len(entries)+3, st.Dropped)
		require.EqualValues(t, 3, st.Untold)

		// A deliverer whose receiver works frees the log; the next event
		// comes after the notice.
		_, reg := f.start(t, "r1", Options{TrimEvery: 50 * time.Millisecond})
		f.rcv.waitFor(t, len(entries)+1) // and the first notice; the filler is not an event
		require.Eventually(t, func() bool {
			return summed(t, reg, "headcount_webhook_log_dropped_total") == float64(st.Dropped)
		}, 10*time.Second, 10*time.Millisecond, "headcount_webhook_log_dropped_total")
		require.Eventually(t, func() bool {
			st, err := log.Stats(ctx, rdb)
			return err == nil && st.Bytes < budget/2
		}, 10*time.Second, 10*time.Millisecond, "the delivered log was never trimmed")
		rec.Add(app.ID, "news", 1)
		require.NoError(t, rec.Flush(ctx))
		// Channels are delivered in parallel: what came, in any order.
		got := f.rcv.waitFor(t, len(entries)+4)
		require.Len(t, got, len(entries)+4)
		for _, want := range []string{fmt.Sprint("events_dropped ", flood-len(entries)), "events_dropped 3", "channel_occupied news", "subscription_count news 1"} {
			require.Contains(t, got, want)
		}
	})
}

// TestTrimFreesLogBudget: delivering and trimming the log lowers its bytes
// (no counter to fall out of step), and the events a full log refused get
// in again.
func TestTrimFreesLogBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.New(t).Client(t))
	ctx := context.Background()
	log := eventlog.For(keyspace.Space{}, f.app.ID)
	ev := func(i int) string {
		b, err := json.Marshal(Event{Name: ClientEvent, Channel: fmt.Sprint("private-", i), Event: "client-x", Data: strings.Repeat("y", 1000), SocketID: "1.1"})
		require.NoError(t, err)
		return string(b)
	}
	for i := range 20 {
		_, _, err := log.Append(ctx, f.rdb, 0, ev(i))
		require.NoError(t, err)
	}
	st, err := log.Stats(ctx, f.rdb)
	require.NoError(t, err)
	full := st.Bytes
	require.Greater(t, full, int64(20*1000))
	// A budget of what the log holds: the next event is refused.
	refused, _, err := log.Append(ctx, f.rdb, full, ev(20))
	require.NoError(t, err)
	require.Equal(t, 1, refused)

	_, reg := f.start(t, "r1", Options{TrimEvery: 50 * time.Millisecond})
	f.rcv.waitFor(t, 20)
	var now int64
	require.Eventually(t, func() bool {
		st, err := log.Stats(ctx, f.rdb)
		now = st.Bytes
		return err == nil && now < full/10
	}, 5*time.Second, 20*time.Millisecond, "trimming the delivered log did not lower its bytes")
	require.Eventually(t, func() bool {
		st, err := log.Stats(ctx, f.rdb) // again: the trims go on
		return err == nil && summed(t, reg, "headcount_webhook_log_bytes") == float64(st.Bytes)
	}, 5*time.Second, 20*time.Millisecond, "headcount_webhook_log_bytes")
	refused, _, err = log.Append(ctx, f.rdb, full, ev(20))
	require.NoError(t, err)
	require.Zero(t, refused, "the trimmed log still refuses events")
	// The notice goes out among the first deliveries or after them, as
	// the batches fall, and a delivery may come twice (at least once).
	require.Eventually(t, func() bool {
		f.rcv.mu.Lock()
		defer f.rcv.mu.Unlock()
		return slices.Contains(f.rcv.got, "events_dropped 1")
	}, 15*time.Second, 10*time.Millisecond, "the refused one is told of")
}
