package announce

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/protocol"
)

// TestMain fails the package if goroutines outlive its tests (redistest.Main).
func TestMain(m *testing.M) {
	redistest.Main(m)
}

const (
	wait = 10 * time.Second
	tick = 5 * time.Millisecond
)

// registry has "app", which asks for everything (counts on sockets and in
// webhooks, admission webhooks, one seat on presence-limited channels),
// and "quiet", which asks for nothing.
func registry(t *testing.T) *apps.Registry {
	t.Helper()
	hook := apps.Webhook{URL: "http://127.0.0.1:1/hooks", EventTypes: []string{"subscription_count", "admission_admitted", "admission_dropped"}}
	r, err := apps.New([]*apps.App{
		{ID: "app", Key: "app-key", Secret: "s", Enabled: true, EnableSubscriptionCount: true,
			Webhooks: []apps.Webhook{hook}, Capacities: []apps.Capacity{{Prefix: "presence-limited", Capacity: 1}},
			Admission: apps.Admission{GraceSeconds: 3600}},
		{ID: "quiet", Key: "quiet-key", Secret: "s", Enabled: true},
	})
	require.NoError(t, err)
	return r
}

// listener is a bus joined to channels, recording what reaches it.
type listener struct {
	mu  sync.Mutex
	got []string
}

// listen joins app's channels on a bus of its own and waits for Redis to
// confirm them.
func listen(t *testing.T, rdb redis.UniversalClient, app string, channels ...string) *listener {
	t.Helper()
	l := &listener{}
	bus := fanout.New(rdb, fanout.Options{Logger: logging.TestLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = bus.Run(ctx, func(_ string, m fanout.Message) {
			l.mu.Lock()
			defer l.mu.Unlock()
			line := m.Event + " " + m.Channel + " " + m.Data
			if m.ExceptUser != "" {
				line += " except " + m.ExceptUser
			}
			if m.Version != 0 && m.Event == protocol.EventSubscriptionCount {
				line += " v" + strconv.FormatInt(m.Version, 10)
			}
			l.got = append(l.got, line)
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	for _, ch := range channels {
		bus.Join(app, ch)
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	require.NoError(t, bus.WaitJoined(wctx, app, channels))
	return l
}

// waitFor waits until the listener got exactly want, in any order.
func (l *listener) waitFor(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	require.Eventually(t, func() bool {
		l.mu.Lock()
		got = slices.Sorted(slices.Values(l.got))
		l.mu.Unlock()
		return slices.Equal(got, want)
	}, wait, tick, "want %q", want)
}

// hooks reads app's event log as "name channel [user] [count]" lines.
func hooks(t *testing.T, rdb redis.UniversalClient, app string) []string {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), eventlog.Key(keyspace.Space{}, app), "-", "+").Result()
	require.NoError(t, err)
	out := []string{}
	for _, e := range entries {
		var ev struct {
			Name              string `json:"name"`
			Channel           string `json:"channel"`
			UserID            string `json:"user_id"`
			SubscriptionCount *int64 `json:"subscription_count"`
		}
		raw, _ := e.Values["ev"].(string)
		require.NoError(t, json.Unmarshal([]byte(raw), &ev), raw)
		line := []string{ev.Name, ev.Channel}
		if ev.UserID != "" {
			line = append(line, ev.UserID)
		}
		if ev.SubscriptionCount != nil {
			line = append(line, strconv.FormatInt(*ev.SubscriptionCount, 10))
		}
		out = append(out, strings.Join(line, " "))
	}
	slices.Sort(out)
	return out
}

func newAnnouncer(t *testing.T, rdb redis.UniversalClient, opts Options) *Announcer {
	t.Helper()
	if opts.Apps == nil {
		opts.Apps = registry(t)
	}
	opts.Bus = fanout.New(rdb, fanout.Options{Logger: logging.TestLogger(t)})
	opts.Redis = rdb
	opts.Logger = logging.TestLogger(t)
	return New(opts)
}

// TestCounts: a count change announces the new count of each channel
// whose kind announces counts on the bus, with its version, and nothing
// for vacated, presence and user channels; an app asking for nothing gets
// no count at all. The subscription_count webhooks are not announced: the
// count scripts log them.
func TestCounts(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	chans := []string{"news", "private-x", "vacated", "presence-room", "#server-to-user-u1"}
	l := listen(t, rdb, "app", chans...)
	quiet := listen(t, rdb, "quiet", chans...)
	a := newAnnouncer(t, rdb, Options{})

	e := counts.Edges{App: "app", Channels: map[string]int64{"news": 3, "private-x": 1, "vacated": 0, "presence-room": 2, "#server-to-user-u1": 1},
		Versions: map[string]int64{"news": 7, "private-x": 8}}
	require.True(t, a.wants(e))
	a.announce(ctx, e)
	l.waitFor(t,
		`pusher_internal:subscription_count news {"subscription_count":3} v7`,
		`pusher_internal:subscription_count private-x {"subscription_count":1} v8`)
	require.Empty(t, hooks(t, rdb, "app"), "subscription_count webhooks are the count scripts' to log")

	e.App = "quiet"
	require.False(t, a.wants(e), "an app asking for no counts wants no count edges")
	a.announce(ctx, e)
	// A marker published after: once it arrives, nothing else came before it.
	require.NoError(t, a.opts.Bus.Publish(ctx, "quiet", fanout.Message{Channel: "news", Event: "marker"}))
	quiet.waitFor(t, "marker news ")
	require.Empty(t, hooks(t, rdb, "quiet"))
}

// TestMembers: member edges, from a real recorder's flushes, publish
// member_added to everyone but the member's own sockets and
// member_removed, for any app; a leaver starts their grace at the gate
// first, and OnLeft hears whether a slot was kept.
func TestMembers(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	ch := "presence-limited-1"
	l := listen(t, rdb, "app", ch)
	var edges []counts.Edges
	rec := counts.NewRecorder(rdb, "n1", counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t),
		OnFlushed: func(e counts.Edges) { edges = append(edges, e) }})
	type left struct {
		app, ch, user string
		kept          bool
	}
	var lefts []left
	gate := admission.New(rdb, keyspace.Space{})
	a := newAnnouncer(t, rdb, Options{Gate: gate, OnLeft: func(app, ch, user string, r admission.Rule, kept bool) {
		require.Equal(t, time.Hour, r.Grace, "the app's rule")
		lefts = append(lefts, left{app, ch, user, kept})
	}})
	rule := admission.RuleFor(registry(t).ByID("app"), ch)
	// The node registers, as with its first socket: the gate seats nobody
	// new before some node has (counts.CompleteKey).
	rec.AddConnections("app", 1)
	require.NoError(t, rec.Flush(ctx))

	res, err := gate.Check(ctx, "app", ch, "alice", rule)
	require.NoError(t, err)
	require.Equal(t, admission.Admitted, res.Status)
	ok, _, _, _, err := gate.Join(ctx, "app", ch, "alice", rule)
	require.NoError(t, err)
	require.True(t, ok)
	rec.AddMember("app", ch, "alice", json.RawMessage(`{"n":1}`), 1)
	require.NoError(t, rec.Flush(ctx))
	rec.AddMember("app", ch, "alice", nil, -1)
	require.NoError(t, rec.Flush(ctx))
	require.Len(t, edges, 2)
	for _, e := range edges {
		require.True(t, a.wants(e))
	}
	a.announce(ctx, edges...)
	l.waitFor(t,
		`pusher_internal:member_added `+ch+` {"user_id":"alice","user_info":{"n":1}} except alice`,
		`pusher_internal:member_removed `+ch+` {"user_id":"alice"}`)
	require.Equal(t, []left{{"app", ch, "alice", true}}, lefts, "alice keeps her seat for the grace")
	st, _, err := gate.State(ctx, "app", ch, rule)
	require.NoError(t, err)
	require.Equal(t, 1, st.Occupancy, "the seat is held for her grace")
	require.Empty(t, hooks(t, rdb, "app"), "member webhooks are the count scripts' to log")
}

// TestThrottle: with Throttle, a busy channel's counts go out at most once
// per CountEvery, the last of a burst by trailing; quiet channels' at once.
func TestThrottle(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	l := listen(t, rdb, "app", "busy", "calm")
	a := newAnnouncer(t, rdb, Options{Throttle: true})
	count := func(ch string, n int64) counts.Edges {
		return counts.Edges{App: "app", Channels: map[string]int64{ch: n}, Versions: map[string]int64{ch: n}}
	}
	a.announce(ctx, count("busy", BusyChannel+1))
	a.announce(ctx, count("busy", BusyChannel+2))
	a.announce(ctx, count("busy", BusyChannel+3))
	a.announce(ctx, count("calm", 1))
	a.announce(ctx, count("calm", 2))
	a.trailing(ctx, time.Now())
	l.waitFor(t,
		`pusher_internal:subscription_count busy {"subscription_count":101} v101`,
		`pusher_internal:subscription_count calm {"subscription_count":1} v1`,
		`pusher_internal:subscription_count calm {"subscription_count":2} v2`)

	// An older count arriving late (another unit, merged after) does not
	// replace the held one.
	a.announce(ctx, count("busy", BusyChannel+2))
	a.trailing(ctx, time.Now().Add(CountEvery))
	l.waitFor(t,
		`pusher_internal:subscription_count busy {"subscription_count":101} v101`,
		`pusher_internal:subscription_count busy {"subscription_count":103} v103`,
		`pusher_internal:subscription_count calm {"subscription_count":1} v1`,
		`pusher_internal:subscription_count calm {"subscription_count":2} v2`)

	a.trailing(ctx, time.Now().Add(3*CountEvery))
	a.mu.Lock()
	require.Empty(t, a.counts, "quiet channels are forgotten")
	a.mu.Unlock()
}

// TestWaitJoined: with WaitJoined, counts wait for the bus's joins, but
// only up to a second.
func TestWaitJoined(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	a := newAnnouncer(t, rdb, Options{WaitJoined: true})
	// Joined but never confirmed: the bus is not running.
	a.opts.Bus.Join("app", "news")
	start := time.Now()
	a.announce(ctx, counts.Edges{App: "app", Channels: map[string]int64{"news": 1}})
	require.GreaterOrEqual(t, time.Since(start), joinWait)
	require.Less(t, time.Since(start), joinWait+time.Second)
}

// TestPublishFailure: an event the bus does not take is counted and
// dropped; the rest still goes out.
func TestPublishFailure(t *testing.T) {
	srv := redistest.New(t)
	rdb := srv.Client(t)
	failed := 0
	a := newAnnouncer(t, rdb, Options{Timeout: 200 * time.Millisecond, OnPublishError: func() { failed++ }})
	srv.Kill()
	a.announce(context.Background(), counts.Edges{App: "app", Channels: map[string]int64{"news": 1},
		Members: []counts.MemberEdge{{Channel: "presence-r", UserID: "u", Added: true}}})
	require.Equal(t, 2, failed)
}

// TestAdmission: a gate call's outcome is counted, logged for the
// admission webhooks the app asks for, and, when anyone moved or notify is
// set, announced to the nodes holding the channel's waiters.
func TestAdmission(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	ch := "presence-limited-1"
	l := listen(t, rdb, "app", protocol.AdmissionChannel(ch))
	reg := prometheus.NewRegistry()
	a := newAnnouncer(t, rdb, Options{Metrics: admission.NewMetrics(reg)})
	ap := registry(t).ByID("app")

	a.Admission(ctx, ap, ch, admission.State{Capacity: 1, Occupancy: 1, Waiting: 2},
		admission.Changes{Promoted: []string{"bob"}, Dropped: []string{"carol"}}, "dave", false)
	l.waitFor(t, "moved "+protocol.AdmissionChannel(ch)+" ")
	require.Equal(t, []string{"admission_admitted " + ch + " bob", "admission_admitted " + ch + " dave",
		"admission_dropped " + ch + " carol"}, hooks(t, rdb, "app"))
	require.Equal(t, 2, testutil.CollectAndCount(reg, "headcount_admission_admitted_total"), "direct and promoted")

	// Nobody moved: no notice unless asked for.
	a.Admission(ctx, ap, ch, admission.State{Capacity: 1}, admission.Changes{}, "", false)
	a.Admission(ctx, ap, ch, admission.State{Capacity: 1}, admission.Changes{}, "", true)
	l.waitFor(t, "moved "+protocol.AdmissionChannel(ch)+" ", "moved "+protocol.AdmissionChannel(ch)+" ")

	// An app asking for no admission webhooks logs none.
	a.Admission(ctx, registry(t).ByID("quiet"), ch, admission.State{}, admission.Changes{Promoted: []string{"x"}}, "", false)
	require.Empty(t, hooks(t, rdb, "quiet"))
}

// TestSignedInEdges: an edge of the signed-in channel, from a flush or a
// reap, is the user's online or offline on their watch channel, for any
// app, and never a member event on the channel itself nor a gate call.
func TestSignedInEdges(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	ch := protocol.SignedInChannel
	l := listen(t, rdb, "quiet", ch, protocol.WatchUserChannel("u1"), protocol.WatchUserChannel("u2"))
	a := newAnnouncer(t, rdb, Options{OnLeft: func(_, ch, _ string, _ admission.Rule, _ bool) {
		t.Errorf("gate called for %s", ch)
	}})
	e := counts.Edges{App: "quiet", Members: []counts.MemberEdge{{Channel: ch, UserID: "u1", Added: true}, {Channel: ch, UserID: "u2"}}}
	require.True(t, a.wants(e))
	a.announce(ctx, e)
	l.waitFor(t, "online #headcount-watch-user-u1 ", "offline #headcount-watch-user-u2 ")
	require.Empty(t, hooks(t, rdb, "quiet"))
}

// TestFlushedRunDrain: what Flushed queues, Run announces in the order it
// was queued (one channel's counts must not overtake each other), edges
// that cause nothing are dropped, and Drain sends what is queued after
// Run returned, as a stopping process does with its last flush.
func TestFlushedRunDrain(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	l := listen(t, rdb, "app", "news")
	a := newAnnouncer(t, rdb, Options{})
	edge := func(n int64) counts.Edges {
		return counts.Edges{App: "app", Channels: map[string]int64{"news": n}, Versions: map[string]int64{"news": n}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	var want []string
	for n := int64(1); n <= 50; n++ {
		a.Flushed(edge(n))
		a.Flushed(counts.Edges{App: "quiet", Channels: map[string]int64{"news": n}}) // asks for no counts
		want = append(want, protocol.EventSubscriptionCount+" news "+protocol.SubscriptionCountData(n)+" v"+strconv.FormatInt(n, 10))
	}
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.Equal(l.got, want)
	}, wait, tick, "want the 50 counts in order")
	cancel()
	<-done

	a.Flushed(edge(51))
	a.Drain(context.Background())
	want = append(want, protocol.EventSubscriptionCount+" news "+protocol.SubscriptionCountData(51)+" v51")
	l.waitFor(t, want...)
}
