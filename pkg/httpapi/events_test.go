package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pusher "github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/apitest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/protocol"
)

// A third app with small publishing limits.
const (
	limitID     = "app-limits"
	limitKey    = "key-limits"
	limitSecret = "secret-limits"
)

func publishApps(t testing.TB) *apps.Registry {
	t.Helper()
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: appSecret, Enabled: true},
		{ID: offID, Key: offKey, Secret: offSecret, Enabled: false},
		{ID: limitID, Key: limitKey, Secret: limitSecret, Enabled: true,
			MaxEventChannelsAtOnce: 2, MaxEventBatchSize: 2, MaxEventPayloadInKb: 0.5},
	})
	require.NoError(t, err)
	return reg
}

// publishServer starts Redis with counts recorded by a producer (as seeded
// does) and the API with publishApps, and returns both. presence-room-1's
// three sockets belong to two users.
func publishServer(t testing.TB) (*testServer, *redistest.Server) {
	t.Helper()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	rec := counts.NewRecorder(rdb, "node-a", counts.RecorderOptions{Heartbeat: 200 * time.Millisecond})
	rctx, rcancel := context.WithCancel(context.Background())
	rdone := make(chan error, 1)
	go func() { rdone <- rec.Run(rctx) }()
	t.Cleanup(func() {
		rcancel()
		require.NoError(t, <-rdone)
	})
	rec.AddMember(appID, "presence-room-1", "u1", json.RawMessage(`{}`), 2)
	rec.AddMember(appID, "presence-room-1", "u2", json.RawMessage(`{"n":2}`), 1)
	want := map[string]int64{"presence-room-1": 3, "private-a": 2, "public-b": 1}
	for ch, n := range want {
		rec.Add(appID, ch, n)
	}
	store := counts.NewStore(rdb, keyspace.Space{})
	require.Eventually(t, func() bool {
		got, err := store.Channels(context.Background(), appID, "")
		users, uerr := store.UserCount(context.Background(), appID, "presence-room-1")
		return err == nil && uerr == nil && fmt.Sprint(got) == fmt.Sprint(want) && users == 2
	}, 10*time.Second, 10*time.Millisecond, "counts never reached %v", want)

	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: config.HTTPAPI{
		Common: config.Common{Redis: srv.URL(), AdminAddr: "127.0.0.1:0", Apps: publishApps(t)},
		Addr:   "127.0.0.1:0",
	}, Logger: logging.TestLogger(t), Registry: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	return &testServer{app: a, base: "http://" + a.Addr(), reg: reg}, srv
}

// listener is a node's side of the bus: what the API published on the
// channels it joined.
type listener struct {
	mu  sync.Mutex
	got []fanout.Message
}

// listen joins channels of app-1 on a fresh Bus and waits until Redis has
// the subscriptions, so nothing published afterwards is missed.
func listen(t *testing.T, rdb redis.UniversalClient, channels ...string) *listener {
	t.Helper()
	l := &listener{}
	bus := fanout.New(rdb, fanout.Options{})
	for _, ch := range channels {
		bus.Join(appID, ch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- bus.Run(ctx, func(_ string, m fanout.Message) {
			l.mu.Lock()
			l.got = append(l.got, m)
			l.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // waits for the listener to end; the test checks what it heard
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, ch := range channels {
			topic := keyspace.Space{}.App(appID) + "ev:" + ch // fanout's documented topic name
			ctx := context.Background()
			var n map[string]int64
			var err error
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				// Shard channels live on the master of the topic's slot.
				m, merr := cc.MasterForKey(ctx, topic)
				require.NoError(c, merr)
				n, err = m.PubSubShardNumSub(ctx, topic).Result()
			} else {
				n, err = rdb.PubSubNumSub(ctx, topic).Result()
			}
			require.NoError(c, err)
			assert.Equal(c, int64(1), n[topic], topic)
		}
	}, 10*time.Second, 10*time.Millisecond)
	return l
}

// wait returns the messages once there are n of them.
func (l *listener) wait(t *testing.T, n int) []fanout.Message {
	t.Helper()
	var got []fanout.Message
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		got = slices.Clone(l.got)
		return len(got) >= n
	}, 10*time.Second, 5*time.Millisecond, "want %d messages, have %v", n, got)
	require.Len(t, got, n, "more messages than expected: %v", got)
	l.mu.Lock()
	l.got = nil
	l.mu.Unlock()
	return got
}

// post sends a POST signed with creds (app-1's by default) to path.
func (s *testServer) post(t testing.TB, path string, body []byte, creds ...string) response {
	t.Helper()
	key, secret := appKey, appSecret
	if len(creds) == 2 {
		key, secret = creds[0], creds[1]
	}
	escaped := (&url.URL{Path: path}).EscapedPath()
	return s.do(t, http.MethodPost, escaped, signed(http.MethodPost, path, nil, body, key, secret, time.Now()), body)
}

func TestTriggerWithPusherGo(t *testing.T) {
	t.Parallel()
	s, srv := publishServer(t)
	rdb := srv.Client(t)
	l := listen(t, rdb, "public-b", "private-a", "presence-room-1", "public-none", "#server-to-user-7")
	c := s.pusherClient(t, appSecret)

	require.NoError(t, c.Trigger("public-b", "greet", map[string]string{"hello": "world"}))
	require.Equal(t, []fanout.Message{{Channel: "public-b", Event: "greet", Data: `{"hello":"world"}`}}, l.wait(t, 1))

	// Counts with the publish: user_count is distinct users, presence only.
	both := "user_count,subscription_count"
	res, err := c.TriggerWithParams("presence-room-1", "ev", "x", pusher.TriggerParams{Info: &both})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.TriggerChannelListItem{"presence-room-1": {UserCount: ptr(2), SubscriptionCount: ptr(3)}}, res.Channels)
	l.wait(t, 1)

	// Several channels, one message each; repeats are published once.
	sid := "123.456"
	res, err = c.TriggerMultiWithParams([]string{"private-a", "public-b", "presence-room-1", "public-none", "public-b"}, "multi", "d",
		pusher.TriggerParams{Info: &both, SocketID: &sid})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.TriggerChannelListItem{
		"private-a":       {SubscriptionCount: ptr(2)},
		"public-b":        {SubscriptionCount: ptr(1)},
		"presence-room-1": {UserCount: ptr(2), SubscriptionCount: ptr(3)},
		"public-none":     {SubscriptionCount: ptr(0)},
	}, res.Channels)
	got := l.wait(t, 4)
	slices.SortFunc(got, func(a, b fanout.Message) int { return strings.Compare(a.Channel, b.Channel) })
	for i, ch := range []string{"presence-room-1", "private-a", "public-b", "public-none"} {
		require.Equal(t, fanout.Message{Channel: ch, Event: "multi", Data: "d", ExceptSocket: sid}, got[i])
	}

	// Without info the answer is {} and pusher-http-go sees no channels.
	res, err = c.TriggerMultiWithParams([]string{"public-b"}, "plain", "d", pusher.TriggerParams{})
	require.NoError(t, err)
	require.Empty(t, res.Channels)
	l.wait(t, 1)
	sub := "subscription_count"
	res, err = c.TriggerWithParams("presence-room-1", "ev", "x", pusher.TriggerParams{Info: &sub})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.TriggerChannelListItem{"presence-room-1": {SubscriptionCount: ptr(3)}}, res.Channels)
	l.wait(t, 1)

	require.NoError(t, c.TriggerExclusive("public-b", "excl", "d", "1.2")) //nolint:staticcheck // deprecated in the SDK but still what older servers call: its wire form must keep working
	require.Equal(t, "1.2", l.wait(t, 1)[0].ExceptSocket)

	require.NoError(t, c.SendToUser("7", "notice", map[string]int{"x": 1}))
	require.Equal(t, []fanout.Message{{Channel: "#server-to-user-7", Event: "notice", Data: `{"x":1}`}}, l.wait(t, 1))

	// Batches: aligned by index when any item asks for info.
	batch, err := c.TriggerBatch([]pusher.Event{
		{Channel: "private-a", Name: "b1", Data: "1", Info: &sub},
		{Channel: "public-b", Name: "b2", Data: "2", SocketID: &sid},
		{Channel: "presence-room-1", Name: "b3", Data: "3", Info: &both},
		{Channel: "public-b", Name: "b4", Data: "4", Info: ptr("user_count")},
	})
	require.NoError(t, err)
	require.Equal(t, []pusher.TriggerBatchChannelListItem{
		{SubscriptionCount: ptr(2)}, {}, {UserCount: ptr(2), SubscriptionCount: ptr(3)}, {},
	}, batch.Batch)
	got = l.wait(t, 4)
	slices.SortFunc(got, func(a, b fanout.Message) int { return strings.Compare(a.Event, b.Event) })
	require.Equal(t, []fanout.Message{
		{Channel: "private-a", Event: "b1", Data: "1"},
		{Channel: "public-b", Event: "b2", Data: "2", ExceptSocket: sid},
		{Channel: "presence-room-1", Event: "b3", Data: "3"},
		{Channel: "public-b", Event: "b4", Data: "4"},
	}, got)
	batch, err = c.TriggerBatch([]pusher.Event{{Channel: "public-b", Name: "b", Data: "1"}})
	require.NoError(t, err)
	require.Nil(t, batch.Batch)
	l.wait(t, 1)

	users, err := c.GetChannelUsers("presence-room-1")
	require.NoError(t, err)
	require.Equal(t, &pusher.Users{List: []pusher.User{{ID: "u1"}, {ID: "u2"}}}, users)
	users, err = c.GetChannelUsers("presence-empty")
	require.NoError(t, err)
	require.Equal(t, &pusher.Users{List: []pusher.User{}}, users)
	_, err = c.GetChannelUsers("private-a")
	require.ErrorContains(t, err, `Status Code: 400 - Users can only be listed for presence channels, and "private-a" is not one`)

	_, err = s.pusherClient(t, "wrong").TriggerBatch([]pusher.Event{{Channel: "public-b", Name: "b", Data: "1"}})
	require.ErrorContains(t, err, "Status Code: 401 - Invalid signature")

	require.Equal(t, 0.0, testutil.ToFloat64(s.app.metrics.redisErrors))
	require.Equal(t, 7.0, testutil.ToFloat64(s.app.metrics.requests.WithLabelValues("POST /apps/{app_id}/events", "200")))
}

// TestTerminateConnectionsPublishes: pusher-http-go v5.1.1 has no
// TerminateUserConnections, so the request is signed as the Node SDK signs
// it (POST with body {} and body_md5). It puts one order on the user's
// terminate channel, which wsnode acts on (TestTerminateUserConnections
// there, and test/e2e end to end).
func TestTerminateConnectionsPublishes(t *testing.T) {
	t.Parallel()
	s, srv := publishServer(t)
	ch := protocol.TerminateUserChannel("user-7")
	l := listen(t, srv.Client(t), ch)
	r := s.post(t, "/apps/"+appID+"/users/user-7/terminate_connections", []byte(`{}`))
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, "{}\n", r.body)
	require.Equal(t, []fanout.Message{{Channel: ch, Event: terminateEvent}}, l.wait(t, 1))
	// An empty body is accepted too.
	r = s.post(t, "/apps/"+appID+"/users/user-7/terminate_connections", nil)
	require.Equal(t, http.StatusOK, r.code, r.body)
	l.wait(t, 1)
}

func TestPublishResponseShapes(t *testing.T) {
	t.Parallel()
	s, _ := publishServer(t)
	events, batch := "/apps/"+appID+"/events", "/apps/"+appID+"/batch_events"
	for _, tc := range []struct{ name, path, body, want string }{
		{"event", events, `{"name":"e","data":"d","channel":"public-b"}`, `{}`},
		{"event with info", events, `{"name":"e","data":"d","channels":["public-b","presence-room-1"],"info":"subscription_count,user_count"}`,
			`{"channels":{"presence-room-1":{"subscription_count":3,"user_count":2},"public-b":{"subscription_count":1}}}`},
		{"user_count only", events, `{"name":"e","data":"d","channels":["public-b","presence-room-1"],"info":"user_count"}`,
			`{"channels":{"presence-room-1":{"user_count":2},"public-b":{}}}`},
		{"user channel with info", events, `{"name":"e","data":"d","channel":"#server-to-user-1","info":"subscription_count"}`,
			`{"channels":{"#server-to-user-1":{}}}`},
		{"empty info", events, `{"name":"e","data":"d","channel":"public-b","info":""}`, `{}`},
		{"unknown fields are ignored", events, `{"name":"e","data":"d","channel":"public-b","extra":[1]}`, `{}`},
		{"batch", batch, `{"batch":[{"name":"e","data":"d","channel":"public-b"}]}`, `{}`},
		{"batch with info", batch, `{"batch":[{"name":"e","data":"d","channel":"public-b"},{"name":"e","data":"d","channel":"private-a","info":"subscription_count"}]}`,
			`{"batch":[{},{"subscription_count":2}]}`},
		{"users", "/apps/" + appID + "/channels/presence-room-1/users", "", `{"users":[{"id":"u1"},{"id":"u2"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r response
			if tc.body == "" {
				r = s.get(t, tc.path, nil)
			} else {
				r = s.post(t, tc.path, []byte(tc.body))
			}
			require.Equal(t, http.StatusOK, r.code, r.body)
			require.Equal(t, tc.want+"\n", r.body)
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
		})
	}
}

func TestPublishErrors(t *testing.T) {
	t.Parallel()
	s, _ := publishServer(t)
	events, batch := "/apps/"+appID+"/events", "/apps/"+appID+"/batch_events"
	ev := func(fields string) string { return `{"name":"e","data":"d",` + fields + `}` }
	item := func(fields string) string { return `{"name":"e","data":"d","channel":"c"` + fields + `}` }
	items := func(n int) string {
		return `{"batch":[` + strings.TrimSuffix(strings.Repeat(item("")+",", n), ",") + `]}`
	}
	big := strings.Repeat("x", 10<<10)
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	manyJSON, _ := json.Marshal(many)
	limits := []string{limitKey, limitSecret}

	for _, tc := range []struct {
		name, path, body string
		creds            []string
		method           string
		code             int
		want             string
	}{
		{name: "malformed JSON", path: events, body: `{"name":`, code: 400, want: "Malformed JSON body: unexpected end of JSON input"},
		{name: "not an object", path: events, body: `[1]`, code: 400, want: "Malformed JSON body"},
		{name: "wrong type", path: events, body: `{"name":1}`, code: 400, want: "Malformed JSON body"},
		{name: "empty body", path: events, body: ``, code: 400, want: "The request body is empty"},
		{name: "no name", path: events, body: `{"data":"d","channel":"c"}`, code: 400, want: "name is required"},
		{name: "name too long", path: events, body: `{"name":"` + strings.Repeat("n", 201) + `","data":"d","channel":"c"}`, code: 400, want: "Event name is 201 bytes long, over the limit of 200"},
		{name: "name of 200", path: events, body: `{"name":"` + strings.Repeat("n", 200) + `","data":"d","channel":"c"}`, code: 200, want: "{}"},
		{name: "no data", path: events, body: `{"name":"e","channel":"c"}`, code: 400, want: "data is required"},
		{name: "data null", path: events, body: `{"name":"e","data":null,"channel":"c"}`, code: 400, want: "data must be a string"},
		{name: "data object", path: events, body: `{"name":"e","data":{"a":1},"channel":"c"}`, code: 400, want: "data must be a string"},
		{name: "data of 10 KB", path: events, body: `{"name":"e","data":"` + big + `","channel":"c"}`, code: 200, want: "{}"},
		{name: "data over 10 KB", path: events, body: `{"name":"e","data":"` + big + `x","channel":"c"}`, code: 413, want: "Event data is 10241 bytes, over the limit of 10240"},
		{name: "no channel", path: events, body: ev(`"channels":[]`), code: 400, want: "A channel is required"},
		{name: "both channel and channels", path: events, body: ev(`"channel":"a","channels":["b"]`), code: 400, want: "either channel or channels"},
		{name: "101 channels", path: events, body: ev(`"channels":` + string(manyJSON)), code: 400, want: "names 101 channels, over the limit of 100"},
		{name: "100 channels", path: events, body: ev(`"channels":` + string(manyJSON[:len(manyJSON)-len(`,"c100"]`)]) + `]`), code: 200, want: "{}"},
		{name: "bad channel", path: events, body: ev(`"channel":"a b"`), code: 400, want: `Invalid channel name: channel name "a b" has characters outside`},
		{name: "internal channel", path: events, body: ev(`"channel":"` + protocol.TerminateUserChannel("7") + `"`), code: 400, want: "Invalid channel name"},
		{name: "bad socket_id", path: events, body: ev(`"channel":"c","socket_id":"abc"`), code: 400, want: `Invalid socket_id "abc"`},
		{name: "socket_id with a sign", path: events, body: ev(`"channel":"c","socket_id":"-1.2"`), code: 400, want: "Invalid socket_id"},
		{name: "bad info", path: events, body: ev(`"channel":"c","info":"subscription_count,occupied"`), code: 400, want: `Unsupported info attribute "occupied"`},
		{name: "app channel limit", path: "/apps/" + limitID + "/events", creds: limits, body: ev(`"channels":["a","b","c"]`), code: 400, want: "over the limit of 2"},
		{name: "app payload limit", path: "/apps/" + limitID + "/events", creds: limits, body: `{"name":"e","data":"` + strings.Repeat("x", 513) + `","channel":"c"}`, code: 413, want: "over the limit of 512"},

		{name: "batch not an object", path: batch, body: `[]`, code: 400, want: "Malformed JSON body"},
		{name: "batch missing", path: batch, body: `{"events":[]}`, code: 400, want: `The body must be {"batch":[...events...]}`},
		{name: "batch empty", path: batch, body: `{"batch":[]}`, code: 400, want: "The batch has no events"},
		{name: "batch of 10", path: batch, body: items(10), code: 200, want: "{}"},
		{name: "batch of 11", path: batch, body: items(11), code: 400, want: "The batch has 11 events, over the limit of 10"},
		{name: "app batch limit", path: "/apps/" + limitID + "/batch_events", creds: limits, body: items(3), code: 400, want: "The batch has 3 events, over the limit of 2"},
		{name: "batch item without name", path: batch, body: `{"batch":[` + item("") + `,{"data":"d","channel":"c"}]}`, code: 400, want: "batch[1]: name is required"},
		{name: "batch item with channels", path: batch, body: `{"batch":[{"name":"e","data":"d","channels":["c"]}]}`, code: 400, want: "batch[0]: A batch event takes one channel"},
		{name: "batch item too big", path: batch, body: `{"batch":[{"name":"e","data":"` + big + `x","channel":"c"}]}`, code: 413, want: "batch[0]: Event data is 10241 bytes"},
		{name: "batch item bad info", path: batch, body: `{"batch":[` + item(`,"info":"x"`) + `]}`, code: 400, want: `batch[0]: Unsupported info attribute "x"`},
		{name: "batch item bad socket_id", path: batch, body: `{"batch":[` + item(`,"socket_id":"1."`) + `]}`, code: 400, want: `batch[0]: Invalid socket_id "1."`},

		{name: "users of a private channel", method: "GET", path: "/apps/" + appID + "/channels/private-a/users", code: 400, want: "Users can only be listed for presence channels"},
		{name: "users of a bad name", method: "GET", path: "/apps/" + appID + "/channels/presence-a b/users", code: 400, want: "Invalid channel name"},
		{name: "users by POST", path: "/apps/" + appID + "/channels/presence-a/users", body: `{}`, code: 405},
		{name: "terminate with a non-object", path: "/apps/" + appID + "/users/7/terminate_connections", body: `[]`, code: 400, want: "Malformed JSON body"},
		{name: "terminate a long user id", path: "/apps/" + appID + "/users/" + strings.Repeat("u", 129) + "/terminate_connections", body: `{}`, code: 400, want: "over the limit of 128"},
		{name: "terminate by GET", method: "GET", path: "/apps/" + appID + "/users/7/terminate_connections", code: 405},
		{name: "events by GET", method: "GET", path: events, code: 405},

		{name: "unknown app", path: "/apps/nope/events", body: ev(`"channel":"c"`), code: 404, want: `Unknown app id "nope"`},
		{name: "disabled app", path: "/apps/" + offID + "/events", creds: []string{offKey, offSecret}, body: ev(`"channel":"c"`), code: 403, want: "is disabled"},
		{name: "bad signature", path: events, creds: []string{appKey, "wrong"}, body: ev(`"channel":"c"`), code: 401, want: "Invalid signature"},
		{name: "body over the cap", path: events, body: `{"name":"e","data":"` + strings.Repeat("x", maxBodyBytes) + `"}`, code: 413, want: "Request body is over the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r response
			switch tc.method {
			case "GET":
				r = s.get(t, tc.path, nil)
			case "":
				r = s.post(t, tc.path, []byte(tc.body), tc.creds...)
			}
			require.Equal(t, tc.code, r.code, r.body)
			require.Contains(t, r.body, tc.want)
			if tc.code != 200 && tc.code != 405 {
				require.Equal(t, "text/plain; charset=utf-8", r.header.Get("Content-Type"))
			}
		})
	}
	require.Equal(t, 0.0, testutil.ToFloat64(s.app.metrics.redisErrors))
}

// TestPublishRedisDown: a publish Redis did not take is a 503, never a
// made-up success.
func TestPublishRedisDown(t *testing.T) {
	t.Parallel()
	s, srv := publishServer(t)
	srv.KillAndHold(t)
	r := s.post(t, "/apps/"+appID+"/events", []byte(`{"name":"e","data":"d","channel":"c","info":"subscription_count"}`))
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.body)
	require.Contains(t, r.body, "may or may not have been delivered")
	r = s.post(t, "/apps/"+appID+"/users/7/terminate_connections", []byte(`{}`))
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.body)
	r = s.get(t, "/apps/"+appID+"/channels/presence-a/users", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.code, r.body)
}

// TestTriggerOnCluster: on Redis Cluster the publishes (SPUBLISH) and the
// count reads share one pipeline to the master of the app's slot.
func TestTriggerOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.NewCluster(t)
	p := apitest.NewProducer(t, cluster.Client(t), "node-a")
	p.Rec.AddMember(appID, "presence-c", "u1", json.RawMessage(`{}`), 2)
	p.Add(t, appID, map[string]int64{"presence-c": 2, "private-a": 5}, map[string]int64{"presence-c": 2, "private-a": 5})
	l := listen(t, cluster.Client(t), "presence-c", "private-a")
	s := startServer(t, config.Common{RedisCluster: cluster.Seeds()})
	c := s.pusherClient(t, appSecret)
	res, err := c.TriggerMultiWithParams([]string{"presence-c", "private-a"}, "ev", "d", pusher.TriggerParams{Info: ptr("subscription_count,user_count")})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.TriggerChannelListItem{
		"presence-c": {SubscriptionCount: ptr(2), UserCount: ptr(1)},
		"private-a":  {SubscriptionCount: ptr(5)},
	}, res.Channels)
	require.Len(t, l.wait(t, 2), 2)
	batch, err := c.TriggerBatch([]pusher.Event{{Channel: "private-a", Name: "b", Data: "1", Info: ptr("subscription_count")}})
	require.NoError(t, err)
	require.Equal(t, []pusher.TriggerBatchChannelListItem{{SubscriptionCount: ptr(5)}}, batch.Batch)
	l.wait(t, 1)
}
