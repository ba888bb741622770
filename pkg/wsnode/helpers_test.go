package wsnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/wsclient"
	"github.com/headcount/headcount/pkg/wsnode"
)

const (
	appID       = "app-1"
	appKey      = "key-1"
	disabledKey = "key-off"
	wait        = 10 * time.Second
	tick        = 10 * time.Millisecond
)

// TestMain fails the package if goroutines outlive its tests (redistest.Main).
func TestMain(m *testing.M) {
	redistest.Main(m)
}

type testNode struct {
	*wsnode.App
	redis *redistest.Server
	// cluster is the node's Redis Cluster (startNodesOnCluster), or nil.
	cluster *redistest.Cluster
	reg     *prometheus.Registry
	store   *counts.Store
	cfg     config.WSNode
	cancel  context.CancelFunc
	done    chan error
}

// Apps of the test registry. app-1 allows client events; the others each
// turn on one feature or limit, so their frames do not show up elsewhere.
const (
	noClientKey = "key-noclient"
	countAppID  = "app-count"
	countKey    = "key-count"
	limitAppID  = "app-limit"
	limitKey    = "key-limit"
	admAppID    = "app-adm"
	admKey      = "key-adm"
	authAppID   = "app-auth"
	authKey     = "key-auth"
	cacheAppID  = "app-cache"
	cacheKey    = "key-cache"
	wideAppID   = "app-wide"
	wideKey     = "key-wide" // wideChannels per connection, above the default
	capKey      = "key-cap"  // 3 channels per connection
	fewAppID    = "app-few"
	fewKey      = "key-few" // 20 channels occupied at once
	secret      = "secret-1"
)

// wideChannels is the wide app's maxChannelsPerConnection: twice the
// default, so its tests show that the frame budget and the send queue
// follow an app's cap past the default.
const wideChannels = 2 * apps.DefaultMaxChannelsPerConnection

func testApps(t *testing.T) *apps.Registry {
	t.Helper()
	reg, err := apps.New([]*apps.App{
		{ID: appID, Key: appKey, Secret: secret, Enabled: true, EnableClientMessages: true,
			History: []apps.History{{Prefix: "private-chat-kept", Events: 10, Seconds: 600}, keptRule, keptSmallRule}},
		{ID: "app-off", Key: disabledKey, Secret: "secret-2", Enabled: false},
		{ID: "app-noclient", Key: noClientKey, Secret: secret, Enabled: true},
		{ID: countAppID, Key: countKey, Secret: secret, Enabled: true, EnableSubscriptionCount: true},
		{ID: limitAppID, Key: limitKey, Secret: secret, Enabled: true, EnableClientMessages: true,
			MaxConnections: 3, MaxPresenceMembersPerChannel: 2, MaxPresenceMemberSizeInKb: 0.1, MaxEventPayloadInKb: 0.1,
			Admission: apps.Admission{GraceSeconds: 1}},
		{ID: admAppID, Key: admKey, Secret: secret, Enabled: true,
			Capacities: []apps.Capacity{{Prefix: "presence-room-", Capacity: 1}},
			Admission:  apps.Admission{DropoutSeconds: 3, GraceSeconds: 1, TicketSeconds: 30}},
		{ID: authAppID, Key: authKey, Secret: secret, Enabled: true, EnableUserAuthentication: true},
		{ID: cacheAppID, Key: cacheKey, Secret: secret, Enabled: true,
			Webhooks: []apps.Webhook{{URL: "http://127.0.0.1:9/", EventTypes: []string{"cache_miss"}}}},
		{ID: wideAppID, Key: wideKey, Secret: secret, Enabled: true, MaxChannelsPerConnection: wideChannels},
		{ID: "app-cap", Key: capKey, Secret: secret, Enabled: true, MaxChannelsPerConnection: 3},
		{ID: fewAppID, Key: fewKey, Secret: secret, Enabled: true, MaxChannels: 20},
	})
	require.NoError(t, err)
	return reg
}

// startNode runs a node on 127.0.0.1:0 against a fresh redis-server and
// waits until it is ready. The node is stopped when the test ends.
func startNode(t *testing.T, mutate ...func(*config.WSNode)) *testNode {
	t.Helper()
	return startNodeOn(t, redistest.New(t), "", mutate...)
}

// startNodes builds n nodes sharing one redis-server: one cluster.
func startNodes(t *testing.T, n int, mutate ...func(*config.WSNode)) []*testNode {
	t.Helper()
	srv := redistest.New(t)
	nodes := make([]*testNode, n)
	for i := range nodes {
		nodes[i] = startNodeOn(t, srv, fmt.Sprintf("-%d", i), mutate...)
	}
	return nodes
}

func startNodeOn(t *testing.T, srv *redistest.Server, suffix string, mutate ...func(*config.WSNode)) *testNode {
	t.Helper()
	cfg := config.WSNode{
		Common: config.Common{
			Redis: srv.URL(), AdminAddr: "127.0.0.1:0",
			LogLevel: "debug", LogFormat: "text", Apps: testApps(t),
		},
		Addr:      "127.0.0.1:0",
		Transport: os.Getenv("HC_TEST_TRANSPORT"), // empty: the default
		NodeID:    "node-" + strings.ReplaceAll(t.Name(), "/", "-") + suffix,
		Heartbeat: 100 * time.Millisecond,
		Drain:     200 * time.Millisecond,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	n := &testNode{redis: srv, reg: prometheus.NewRegistry(), cfg: cfg, store: counts.NewStore(srv.Client(t), keyspace.Space{}), done: make(chan error, 1)}
	var err error
	n.App, err = wsnode.New(wsnode.Options{Config: cfg, Logger: logging.TestLogger(t), Registry: n.reg})
	require.NoError(t, err)
	return n
}

// run starts Run and waits for /readyz.
func (n *testNode) run(t *testing.T) *testNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-n.done:
			assert.NoError(t, err, "Run")
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	require.Eventually(t, func() bool { return n.readyz(t) == http.StatusOK }, wait, tick, "node never became ready")
	return n
}

// waitRun waits for Run to return after a stop and requires nil; the
// cleanup then finds it returned.
func (n *testNode) waitRun(t *testing.T) {
	t.Helper()
	select {
	case err := <-n.done:
		require.NoError(t, err)
		n.done <- nil
	case <-time.After(wait):
		t.Fatal("Run did not return")
	}
}

func (n *testNode) readyz(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr() + "/readyz")
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// up is the status GET /up answers on the WebSocket port, 0 when it
// cannot be reached.
func (n *testNode) up(t *testing.T) int {
	t.Helper()
	resp, err := http.Get("http://" + n.Addr() + "/up")
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (n *testNode) url(key, query string) string {
	return "ws://" + n.Addr() + "/app/" + key + query
}

// pusherJSQuery is what pusher-js 8 appends to the URL.
const pusherJSQuery = "?protocol=7&client=js&version=8.4.0&flash=false"

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// connect dials the app and reads connection_established.
func (n *testNode) connect(t *testing.T) (*websocket.Conn, string) {
	t.Helper()
	return n.connectKey(t, appKey)
}

// connectKey dials the app with this key and reads connection_established.
func (n *testNode) connectKey(t *testing.T, key string) (*websocket.Conn, string) {
	t.Helper()
	c := dial(t, n.url(key, pusherJSQuery))
	f := read(t, c)
	require.Equal(t, "pusher:connection_established", f.Event)
	return c, f.data(t)["socket_id"].(string)
}

// frame is a server frame decoded strictly: data must be a JSON string.
type frame struct {
	Event   string  `json:"event"`
	Channel string  `json:"channel"`
	Data    *string `json:"data"`
	UserID  string  `json:"user_id"`
	raw     string
}

func (f frame) data(t *testing.T) map[string]any {
	t.Helper()
	require.NotNil(t, f.Data, "frame has no data: %s", f.raw)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(*f.Data), &m), "data of %s is not a JSON object in a string", f.raw)
	return m
}

func read(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	typ, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, websocket.MessageText, typ)
	f := frame{raw: string(b)}
	require.NoError(t, json.Unmarshal(b, &f), "frame %s", b)
	return f
}

func send(t *testing.T, c *websocket.Conn, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(s)))
}

// closeStatus reads until the connection ends and returns its close code.
func closeStatus(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			require.NoError(t, ctx.Err(), "connection was not closed")
			return websocket.CloseStatus(err)
		}
		t.Logf("frame before close: %s", b)
	}
}

func subscribe(t *testing.T, c *websocket.Conn, channel string) {
	t.Helper()
	send(t, c, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+channel+`"}}`)
	f := read(t, c)
	require.Equal(t, "pusher_internal:subscription_succeeded", f.Event, f.raw)
	require.Equal(t, channel, f.Channel)
	require.Equal(t, "{}", *f.Data)
}

// subscribeCounted subscribes c to channel of an app that announces
// counts, returning the counts that came before the reply: a count may, as
// the flush of the socket's own subscription (or another's) races the
// node's join of the channel on the bus, which the reply waits for.
func subscribeCounted(t *testing.T, c *websocket.Conn, channel string) (before []frame) {
	t.Helper()
	send(t, c, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+channel+`"}}`)
	for {
		f := read(t, c)
		if f.Event == "pusher_internal:subscription_count" && f.Channel == channel {
			before = append(before, f)
			continue
		}
		require.Equal(t, "pusher_internal:subscription_succeeded", f.Event, f.raw)
		require.Equal(t, channel, f.Channel)
		return before
	}
}

func pingPong(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, `{"event":"pusher:ping","data":{}}`)
	f := read(t, c)
	require.Equal(t, `{"event":"pusher:pong","data":"{}"}`, f.raw)
}

// requireCounts waits until app-1's global counts in Redis are want.
func (n *testNode) requireCounts(t *testing.T, want map[string]int64) {
	t.Helper()
	requireAppCounts(t, n, appID, want)
}

// requireAppCounts waits until app's global counts in Redis are want.
func requireAppCounts(t *testing.T, n *testNode, app string, want map[string]int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := n.store.Channels(context.Background(), app, "")
		require.NoError(c, err)
		assert.Equal(c, want, got)
	}, wait, tick)
}

// rawConn is a WebSocket client on a bare net.Conn (wsclient.Conn): it
// starts no goroutines, so goroutine counts measure the server alone.
type rawConn struct{ *wsclient.Conn }

// dialSubscribed is a pusher-js-like raw connection to addr subscribed to
// channel, its subscription_succeeded read.
func dialSubscribed(t *testing.T, addr, channel string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr, "/app/"+appKey+pusherJSQuery)
	require.Contains(t, c.read(t), "pusher:connection_established")
	c.send(t, subscribeFrame(channel, "", ""))
	require.Contains(t, c.read(t), "pusher_internal:subscription_succeeded")
	return c
}

func dialRaw(t *testing.T, addr, path string) *rawConn {
	t.Helper()
	return dialRawWith(t, &net.Dialer{}, addr, path)
}

func dialRawWith(t *testing.T, d *net.Dialer, addr, path string) *rawConn {
	t.Helper()
	return dialRawSending(t, d, addr, path, nil)
}

// dialRawSending is dialRawWith whose handshake request carries early, a
// client's first frames, in the same write.
func dialRawSending(t *testing.T, d *net.Dialer, addr, path string, early []byte) *rawConn {
	t.Helper()
	c, err := wsclient.DialSending(d, addr, path, early)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{c}
}

// send writes one masked text frame (clients must mask).
func (r *rawConn) send(t *testing.T, payload string) {
	t.Helper()
	require.NoError(t, r.Send(payload))
}

// read returns the payload of the next unfragmented frame.
func (r *rawConn) read(t *testing.T) string {
	t.Helper()
	p, err := r.Read(wait)
	require.NoError(t, err)
	return p
}

// sign returns app-1's auth value "<key>:<hex>" for msg, as an app server
// would.
func sign(msg string) string { return signKey(appKey, msg) }

// signKey signs for the app with this key (all test apps share a secret).
func signKey(key, msg string) string { return key + ":" + auth.Sign(secret, msg) }

// subscribeFrame is pusher-js's subscribe frame; channelData is omitted
// when empty.
func subscribeFrame(channel, authValue, channelData string) string {
	d := map[string]string{"channel": channel, "auth": authValue}
	if channelData != "" {
		d["channel_data"] = channelData
	}
	b, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": d})
	return string(b)
}

// subscribePrivate subscribes with a valid signature and requires success.
func subscribePrivate(t *testing.T, c *websocket.Conn, socketID, channel string) {
	t.Helper()
	subscribePrivateKey(t, c, appKey, socketID, channel)
}

func subscribePrivateKey(t *testing.T, c *websocket.Conn, key, socketID, channel string) {
	t.Helper()
	send(t, c, subscribeFrame(channel, signKey(key, socketID+":"+channel), ""))
	f := read(t, c)
	require.Equal(t, "pusher_internal:subscription_succeeded", f.Event, f.raw)
	require.Equal(t, channel, f.Channel)
}

// subscribePresence joins channel as user with info, and returns the
// member list of subscription_succeeded.
func subscribePresence(t *testing.T, c *websocket.Conn, socketID, channel, user, info string) presenceData {
	t.Helper()
	return subscribePresenceKey(t, c, appKey, socketID, channel, `{"user_id":"`+user+`","user_info":`+info+`}`)
}

func subscribePresenceKey(t *testing.T, c *websocket.Conn, key, socketID, channel, cd string) presenceData {
	t.Helper()
	send(t, c, subscribeFrame(channel, signKey(key, socketID+":"+channel+":"+cd), cd))
	f := readSkippingMembers(t, c)
	require.Equal(t, "pusher_internal:subscription_succeeded", f.Event, f.raw)
	require.Equal(t, channel, f.Channel)
	return f.presence(t)
}

type presenceData struct {
	IDs   []string                   `json:"ids"`
	Hash  map[string]json.RawMessage `json:"hash"`
	Count int                        `json:"count"`
}

func (f frame) presence(t *testing.T) presenceData {
	t.Helper()
	require.NotNil(t, f.Data, f.raw)
	var d struct{ Presence presenceData }
	require.NoError(t, json.Unmarshal([]byte(*f.Data), &d), f.raw)
	require.Len(t, d.Presence.IDs, d.Presence.Count, f.raw)
	require.Len(t, d.Presence.Hash, d.Presence.Count, f.raw)
	return d.Presence
}

// readEvent reads frames until one named event arrives.
func readEvent(t *testing.T, c *websocket.Conn, event string) frame {
	t.Helper()
	for {
		f := read(t, c)
		if f.Event == event {
			return f
		}
		t.Logf("skipping %s", f.raw)
	}
}

// readSkippingMembers reads the next frame that is not a presence
// member_added/removed, which other sockets' joins send at any time.
func readSkippingMembers(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	for {
		f := read(t, c)
		if !strings.HasPrefix(f.Event, "pusher_internal:member_") {
			return f
		}
	}
}

// rdb is a client of the node's Redis, a single server or a Cluster.
func (n *testNode) rdb(t *testing.T) redis.UniversalClient {
	t.Helper()
	if n.cluster != nil {
		return n.cluster.Client(t)
	}
	return n.redis.Client(t)
}
