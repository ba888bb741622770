package webhook

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
)

// request is one POST a batchReceiver got.
type request struct {
	events []string // "name channel [user]" in body order
	header http.Header
	at     time.Time
	failed bool // answered 500
}

// batchReceiver is a real HTTP server that validates every request as
// pusher-http-go v5.1.1 does, whatever its number of events, and keeps
// each; fail decides, by the request's index, whether to answer 500.
type batchReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
	errs     []string
	fail     func(i int) bool
}

func newBatchReceiver(t *testing.T, app *apps.App) *batchReceiver {
	r := &batchReceiver{}
	client := &pusher.Client{AppID: app.ID, Key: app.Key, Secret: app.Secret}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		hook, err := client.Webhook(req.Header, body)
		if err != nil || len(hook.Events) == 0 || hook.TimeMs == 0 || req.Header.Get("Content-Type") != "application/json" {
			r.errs = append(r.errs, fmt.Sprintf("invalid webhook %s: %v", body, err))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rq := request{header: req.Header.Clone(), at: time.Now()}
		for _, e := range hook.Events {
			rq.events = append(rq.events, strings.TrimSpace(e.Name+" "+e.Channel+" "+e.UserID))
		}
		if r.fail != nil && r.fail(len(r.requests)) {
			rq.failed = true
			w.WriteHeader(http.StatusInternalServerError)
		}
		r.requests = append(r.requests, rq)
	}))
	t.Cleanup(r.Close)
	return r
}

// delivered returns the events of the requests answered 2xx, in arrival
// order, once there are at least n; it fails the test on an invalid request.
func (r *batchReceiver) delivered(t *testing.T, n int) (events []string, requests []request) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r.mu.Lock()
		requests, errs := slices.Clone(r.requests), slices.Clone(r.errs)
		r.mu.Unlock()
		require.Empty(t, errs)
		events = events[:0]
		for _, rq := range requests {
			if !rq.failed {
				events = append(events, rq.events...)
			}
		}
		if len(events) >= n {
			return events, requests
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d events: %v", len(events), n, events)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// batchFixture is one app whose webhooks are given, each to its own
// receiver (rcv[i] answers webhooks[i]'s URL).
func batchFixture(t *testing.T, hooks ...apps.Webhook) (*fixture, []*batchReceiver) {
	f := &fixture{rdb: redistest.New(t).Client(t), app: &apps.App{ID: "app-1", Key: "key-1", Secret: "secret-1", Enabled: true}}
	var rcvs []*batchReceiver
	for i := range hooks {
		r := newBatchReceiver(t, f.app)
		hooks[i].URL = r.URL + "/hook"
		if hooks[i].EventTypes == nil {
			hooks[i].EventTypes = allTypes
		}
		rcvs = append(rcvs, r)
	}
	f.app.Webhooks = hooks
	reg, err := apps.New([]*apps.App{f.app})
	require.NoError(t, err)
	f.reg = reg
	return f, rcvs
}

func occupied(channels ...string) []Event {
	evs := make([]Event, len(channels))
	for i, c := range channels {
		evs[i] = Event{Name: ChannelOccupied, Channel: c}
	}
	return evs
}

// TestBatchSize: with batching, events already waiting go in requests of
// the batch size, not one request each, and do not wait for maxWait once
// a request is full.
func TestBatchSize(t *testing.T) {
	t.Parallel()
	f, rcv := batchFixture(t, apps.Webhook{Batch: &apps.WebhookBatch{Size: 5, MaxWait: time.Minute}})
	_, reg := f.start(t, "r1", Options{})
	var channels []string
	for i := range 10 {
		channels = append(channels, fmt.Sprint("c", i))
	}
	f.append(t, occupied(channels...)...)
	events, requests := rcv[0].delivered(t, 10)
	require.Len(t, requests, 2, "10 events in requests of 5")
	for _, rq := range requests {
		require.Len(t, rq.events, 5)
	}
	slices.Sort(events)
	want := occupied(channels...)
	require.Len(t, events, len(want))
	require.Eventually(t, func() bool { return summed(t, reg, "headcount_webhook_sent_total") == 10 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 2.0, metricstest.Value(t, reg, "headcount_webhook_request_events_count"))
	require.Equal(t, 10.0, metricstest.Value(t, reg, "headcount_webhook_request_events_sum"))
}

// TestBatchMaxWait: a batch that does not fill is sent once its oldest
// event has waited maxWait, with every event that arrived meanwhile.
func TestBatchMaxWait(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	const maxWait = time.Second
	f, rcv := batchFixture(t, apps.Webhook{Batch: &apps.WebhookBatch{Size: 50, MaxWait: maxWait}})
	f.start(t, "r1", Options{})
	// The deliverer holds its lease and reads before the clock starts.
	f.append(t, occupied("warmup")...)
	rcv[0].delivered(t, 1)
	start := time.Now()
	f.append(t, occupied("a")...)
	f.append(t, occupied("b", "c")...)
	events, requests := rcv[0].delivered(t, 4)
	require.Len(t, requests, 2, "the three later events in one request")
	require.Equal(t, []string{"channel_occupied a", "channel_occupied b", "channel_occupied c"}, requests[1].events)
	waited := requests[1].at.Sub(start)
	require.GreaterOrEqual(t, waited, maxWait, "a partial batch was sent before maxWait")
	require.Less(t, waited, maxWait+2*time.Second, "a partial batch waited far beyond maxWait")
	require.Len(t, events, 4)
}

// TestBatchOrder: a channel's events arrive in log order across requests,
// each once, while requests fail now and then and several channels'
// events share requests.
func TestBatchOrder(t *testing.T) {
	t.Parallel()
	f, rcv := batchFixture(t, apps.Webhook{Batch: &apps.WebhookBatch{Size: 7, MaxWait: 20 * time.Millisecond}})
	rcv[0].fail = func(i int) bool { return i%3 == 1 }
	const perChannel = 30
	channels := []string{"x", "y", "z"}
	f.start(t, "r1", Options{})
	for i := range perChannel {
		var evs []Event
		for _, c := range channels {
			evs = append(evs, Event{Name: MemberAdded, Channel: c, UserID: fmt.Sprint(i)})
		}
		f.append(t, evs...)
	}
	events, requests := rcv[0].delivered(t, perChannel*len(channels))
	require.Len(t, events, perChannel*len(channels), "an event arrived twice")
	for _, c := range channels {
		var users []string
		for _, e := range events {
			if name, rest, _ := strings.Cut(e, " "); name == MemberAdded && strings.HasPrefix(rest, c+" ") {
				users = append(users, strings.TrimPrefix(rest, c+" "))
			}
		}
		want := make([]string, perChannel)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		require.Equal(t, want, users, "channel %s out of order", c)
	}
	failed, sameChannel := 0, false
	for _, rq := range requests {
		if rq.failed {
			failed++
		}
		perReq := map[string]int{}
		for _, e := range rq.events {
			perReq[strings.Fields(e)[1]]++
			sameChannel = sameChannel || perReq[strings.Fields(e)[1]] > 1
		}
		require.LessOrEqual(t, len(rq.events), 7)
	}
	require.Positive(t, failed, "no request failed: the test did not exercise retries")
	require.True(t, sameChannel, "no request carried several events of one channel")
	require.Less(t, len(requests), perChannel*len(channels)/2, "events were not batched")
}

// TestBatchRetriedWhole: a failed request is retried with the same events,
// none acknowledged before a request carrying it succeeded; a replica that
// dies meanwhile loses nothing, and the next one sends them, in order.
func TestBatchRetriedWhole(t *testing.T) {
	t.Parallel()
	f, rcv := batchFixture(t, apps.Webhook{Batch: &apps.WebhookBatch{Size: 10, MaxWait: 50 * time.Millisecond}})
	var failing sync.Map
	failing.Store("on", true)
	rcv[0].fail = func(int) bool { _, on := failing.Load("on"); return on }
	stopA, regA := f.start(t, "a", Options{})
	want := []string{"channel_occupied p", "member_added p u1", "member_added p u2", "channel_occupied q"}
	f.append(t, Event{Name: ChannelOccupied, Channel: "p"}, Event{Name: MemberAdded, Channel: "p", UserID: "u1"},
		Event{Name: MemberAdded, Channel: "p", UserID: "u2"}, Event{Name: ChannelOccupied, Channel: "q"})
	require.Eventually(t, func() bool { return summed(t, regA, "headcount_webhook_failed_total") >= 2 }, 10*time.Second, 10*time.Millisecond)
	rcv[0].mu.Lock()
	tried := slices.Clone(rcv[0].requests)
	rcv[0].mu.Unlock()
	for i, rq := range tried {
		require.Equal(t, want, rq.events, "attempt %d is not the whole batch", i)
	}
	require.Equal(t, 2.0, summed(t, regA, "headcount_webhook_failed_total"))
	require.Equal(t, 0.0, summed(t, regA, "headcount_webhook_sent_total"))
	pending, err := f.rdb.XPending(context.Background(), eventlog.Key(keyspace.Space{}, f.app.ID), groupName(f.app.Webhooks[0].URL)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 4, pending.Count, "events of a failed request were acknowledged")

	stopA()
	failing.Delete("on")
	f.start(t, "b", Options{})
	events, requests := rcv[0].delivered(t, 4)
	require.Equal(t, want, events)
	require.Equal(t, want, requests[len(requests)-1].events, "the taken-over batch in one request")
}

// TestHeaders: a webhook's headers arrive with each request, and the
// request still verifies as Pusher's (the receiver checks it).
func TestHeaders(t *testing.T) {
	t.Parallel()
	headers := map[string]string{"Authorization": "Bearer t0ken", "X-Env": "prod"}
	f, rcv := batchFixture(t, apps.Webhook{Headers: headers})
	f.start(t, "r1", Options{})
	f.append(t, occupied("a", "b")...)
	_, requests := rcv[0].delivered(t, 2)
	require.Len(t, requests, 2, "without batch, one event per request")
	for _, rq := range requests {
		require.Len(t, rq.events, 1)
		require.Equal(t, "Bearer t0ken", rq.header.Get("Authorization"))
		require.Equal(t, "prod", rq.header.Get("X-Env"))
		require.Equal(t, "key-1", rq.header.Get("X-Pusher-Key"))
	}
}

// TestFilter: a webhook with a filter gets only the events of channels
// that start and end as it says; another without one gets them all.
func TestFilter(t *testing.T) {
	t.Parallel()
	f, rcv := batchFixture(t,
		apps.Webhook{Filter: apps.WebhookFilter{ChannelNameStartsWith: "private-", ChannelNameEndsWith: "-orders"}},
		apps.Webhook{},
		apps.Webhook{EventTypes: []string{MemberAdded}, Filter: apps.WebhookFilter{ChannelNameStartsWith: "presence-"}})
	f.start(t, "r1", Options{})
	all := []string{"private-a-orders", "private-b", "public-orders", "private-c-orders", "presence-d-orders"}
	f.append(t, occupied(all...)...)
	f.append(t, Event{Name: MemberAdded, Channel: "presence-d-orders", UserID: "u"}, Event{Name: MemberAdded, Channel: "private-e", UserID: "u"})
	f.append(t, Event{Name: MemberAdded, Channel: "presence-marker-orders", UserID: "m"}, Event{Name: ChannelOccupied, Channel: "private-marker-orders"})
	rcv[0].delivered(t, 3)
	rcv[1].delivered(t, len(all)+4)
	rcv[2].delivered(t, 2)
	// Every webhook has read the whole log and has nothing in flight (an
	// event in flight is pending), so no further request can come.
	ctx, key := context.Background(), eventlog.Key(keyspace.Space{}, f.app.ID)
	require.Eventually(t, func() bool {
		last, err := f.rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil || len(last) != 1 {
			return false
		}
		for _, w := range f.app.Webhooks {
			p, err := f.rdb.XPending(ctx, key, groupName(w.URL)).Result()
			if err != nil || p.Count != 0 {
				return false
			}
		}
		groups, err := f.rdb.XInfoGroups(ctx, key).Result()
		if err != nil || len(groups) != len(f.app.Webhooks) {
			return false
		}
		for _, g := range groups {
			if g.LastDeliveredID != last[0].ID {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the webhooks did not finish the log")
	got := func(r *batchReceiver) []string {
		events, _ := r.delivered(t, 0)
		return slices.Sorted(slices.Values(events))
	}
	require.Equal(t, []string{"channel_occupied private-a-orders", "channel_occupied private-c-orders", "channel_occupied private-marker-orders"}, got(rcv[0]))
	require.Len(t, got(rcv[1]), len(all)+4, "the webhook without a filter gets everything")
	require.Equal(t, []string{"member_added presence-d-orders u", "member_added presence-marker-orders m"}, got(rcv[2]))
}

// TestFilterProducer: client events no webhook's filter lets through are
// not logged at all, so they take none of the log's byte budget.
func TestFilterProducer(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	app := &apps.App{ID: "app-1", Key: "key-1", Secret: "secret-1", Enabled: true, Webhooks: []apps.Webhook{
		{URL: "http://127.0.0.1:9/a", EventTypes: []string{ClientEvent}, Filter: apps.WebhookFilter{ChannelNameStartsWith: "private-"}},
		{URL: "http://127.0.0.1:9/b", EventTypes: []string{ChannelOccupied}},
	}}
	p := NewProducer(rdb, keyspace.Space{}, hclog.NewNullLogger(), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, c := range []string{"public-x", "private-y", "presence-z"} {
		p.Enqueue(app, Event{Name: ClientEvent, Channel: c, Event: "client-a", Data: "{}", SocketID: "1.1"})
	}
	p.Enqueue(app, Event{Name: ChannelOccupied, Channel: "public-x"}) // the other webhook wants it
	key := eventlog.Key(keyspace.Space{}, app.ID)
	require.Eventually(t, func() bool { n, err := rdb.XLen(context.Background(), key).Result(); return err == nil && n >= 2 }, 5*time.Second, 10*time.Millisecond)
	entries, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Values["ev"].(string))
	}
	require.Len(t, got, 2, "%v", got)
	require.Contains(t, got[0], `"channel":"private-y"`)
	require.Contains(t, got[1], `"name":"channel_occupied"`)
}
