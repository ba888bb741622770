package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pusher/pusher-http-go/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/auth"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/protocol"
)

// The default app of binaries started without an apps file.
const (
	e2eAppID     = "app-id"
	e2eAppKey    = "app-key"
	e2eAppSecret = "app-secret"
	wsWait       = 10 * time.Second
)

// TestHTTPAPIPublishAndTerminate drives the publishing side of the HTTP API
// end to end: real WebSocket subscribers on two wsnodes, the httpapi binary
// read and written with pusher-http-go. The subscriptions are counted in
// trigger and batch responses, events reach subscribers on both nodes except
// the excluded socket_id, and terminate_connections closes a signed-in
// user's sockets on both nodes with 4009.
func TestHTTPAPIPublishAndTerminate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	srv := redistest.New(t)
	rdb := srv.Client(t)
	common := []string{"--redis", srv.URL()}
	a, b := startWSNode(t, "ws-a", common...), startWSNode(t, "ws-b", common...)
	api := node{addr: freeAddr(t), admin: freeAddr(t)}
	api.p = start(t, "httpapi", "httpapi", append(common, "--addr", api.addr, "--admin-addr", api.admin)...)
	for _, n := range []node{a, b, api} {
		waitReady(t, n.p, n.admin)
	}
	client := &pusher.Client{AppID: e2eAppID, Key: e2eAppKey, Secret: e2eAppSecret, Host: api.addr}

	// news: two sockets on A (one will be excluded), one on B.
	// presence-room: user u1 on both nodes, u2 on B: 3 sockets, 2 users.
	newsA, _ := wsConnect(t, a.addr)
	excluded, excludedID := wsConnect(t, a.addr)
	newsB, _ := wsConnect(t, b.addr)
	for _, c := range []*websocket.Conn{newsA, excluded, newsB} {
		wsSubscribe(t, c, "", "news", "")
	}
	var members []*websocket.Conn
	for _, m := range []struct{ addr, user string }{{a.addr, "u1"}, {b.addr, "u1"}, {b.addr, "u2"}} {
		c, id := wsConnect(t, m.addr)
		wsSubscribe(t, c, id, "presence-room", `{"user_id":"`+m.user+`"}`)
		members = append(members, c)
	}
	waitTopic(t, rdb, "news", 2)
	waitTopic(t, rdb, "presence-room", 2)
	require.Eventually(t, func() bool {
		ch, err := client.Channel("presence-room", pusher.ChannelParams{Info: ptr("subscription_count,user_count")})
		news, nerr := client.Channel("news", pusher.ChannelParams{Info: ptr("subscription_count")})
		return err == nil && nerr == nil && ch.SubscriptionCount == 3 && ch.UserCount == 2 && news.SubscriptionCount == 3
	}, 10*time.Second, 25*time.Millisecond, "the subscriptions were never counted")

	// One trigger on both channels, excluding one socket, with counts.
	res, err := client.TriggerMultiWithParams([]string{"news", "presence-room"}, "hello", map[string]int{"n": 1},
		pusher.TriggerParams{SocketID: &excludedID, Info: ptr("subscription_count,user_count")})
	require.NoError(t, err)
	require.Equal(t, map[string]pusher.TriggerChannelListItem{
		"news":          {SubscriptionCount: ptr(3)},
		"presence-room": {SubscriptionCount: ptr(3), UserCount: ptr(2)},
	}, res.Channels)
	for _, c := range []*websocket.Conn{newsA, newsB} {
		f := wsReadEvent(t, c, "hello")
		require.Equal(t, "news", f.Channel)
		require.Equal(t, `{"n":1}`, f.Data)
	}
	for _, c := range members {
		require.Equal(t, "presence-room", wsReadEvent(t, c, "hello").Channel)
	}
	// newsA got it, and node A queued it for every local subscriber at once:
	// had the excluded socket been sent it, it would come before this pong.
	wsSend(t, excluded, `{"event":"pusher:ping","data":{}}`)
	require.Equal(t, protocol.EventPong, wsRead(t, excluded).Event)

	// A batch: counts aligned by index, {} for the item without info.
	batch, err := client.TriggerBatch([]pusher.Event{
		{Channel: "news", Name: "b1", Data: "1", Info: ptr("subscription_count")},
		{Channel: "presence-room", Name: "b2", Data: "2", Info: ptr("user_count")},
		{Channel: "news", Name: "b3", Data: "3"},
	})
	require.NoError(t, err)
	require.Equal(t, []pusher.TriggerBatchChannelListItem{{SubscriptionCount: ptr(3)}, {UserCount: ptr(2)}, {}}, batch.Batch)
	for _, c := range []*websocket.Conn{newsB, excluded} {
		require.Equal(t, "1", wsReadEvent(t, c, "b1").Data)
		require.Equal(t, "3", wsReadEvent(t, c, "b3").Data)
	}
	require.Equal(t, "2", wsReadEvent(t, members[2], "b2").Data)

	users, err := client.GetChannelUsers("presence-room")
	require.NoError(t, err)
	require.Equal(t, []pusher.User{{ID: "u1"}, {ID: "u2"}}, users.List)

	// terminate_connections: the user's signed-in sockets on both nodes go,
	// another user's stay, and so does a presence-only socket of that user.
	signedA := wsSignin(t, a.addr, "term-7")
	signedB := wsSignin(t, b.addr, "term-7")
	other := wsSignin(t, b.addr, "term-8")
	presenceOnly, pid := wsConnect(t, a.addr)
	wsSubscribe(t, presenceOnly, pid, "presence-room", `{"user_id":"term-7"}`)
	waitTopic(t, rdb, protocol.TerminateUserChannel("term-7"), 2)
	require.Equal(t, http.StatusOK, terminate(t, api.addr, "term-7"))
	for _, c := range []*websocket.Conn{signedA, signedB} {
		f := wsReadEvent(t, c, protocol.EventError)
		var e struct{ Code int }
		require.NoError(t, json.Unmarshal([]byte(f.Data), &e))
		require.Equal(t, 4009, e.Code, f.Data)
		require.Equal(t, websocket.StatusCode(4009), wsCloseStatus(t, c))
	}
	for _, c := range []*websocket.Conn{other, presenceOnly} {
		wsSend(t, c, `{"event":"pusher:ping","data":{}}`)
		wsReadEvent(t, c, protocol.EventPong)
	}
	waitTopic(t, rdb, protocol.TerminateUserChannel("term-7"), 0)
}

func ptr[T any](v T) *T { return &v }

// terminate POSTs terminate_connections for user as the pusher Node SDK
// does (pusher-http-go v5.1.1 has no such call) and returns the status.
func terminate(t *testing.T, host, user string) int {
	t.Helper()
	path := "/apps/" + e2eAppID + "/users/" + user + "/terminate_connections"
	body := []byte(`{}`)
	q := auth.SignRequest(http.MethodPost, path, url.Values{}, body, e2eAppKey, e2eAppSecret, time.Now())
	resp, err := http.Post("http://"+host+path+"?"+q.Encode(), "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, "{}\n", string(b))
	return resp.StatusCode
}

// waitTopic waits until want nodes are subscribed in Redis to channel's
// topic (fanout's documented <prefix>:{app}:ev:<channel>): a node misses
// what is published before its subscription reached Redis, as with Pusher.
func waitTopic(t *testing.T, rdb redis.UniversalClient, channel string, want int64) {
	t.Helper()
	waitTopicIn(t, rdb, keyspace.Space{}, channel, want)
}

// waitTopicIn is waitTopic for the deployment of keyspace ks.
func waitTopicIn(t *testing.T, rdb redis.UniversalClient, ks keyspace.Space, channel string, want int64) {
	t.Helper()
	topic := ks.App(e2eAppID) + "ev:" + channel
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := rdb.PubSubNumSub(context.Background(), topic).Result()
		require.NoError(c, err)
		assert.Equal(c, want, got[topic])
	}, 10*time.Second, 10*time.Millisecond, topic)
}

// wsFrame is a server frame; Data is the JSON string unwrapped.
type wsFrame struct {
	Event   string `json:"event"`
	Channel string `json:"channel"`
	Data    string `json:"data"`
}

func wsConnect(t *testing.T, addr string) (*websocket.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/"+e2eAppKey+"?protocol=7&client=js&version=8.4.0&flash=false", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CloseNow() })
	f := wsRead(t, c)
	require.Equal(t, protocol.EventConnectionEstablished, f.Event)
	var d struct {
		SocketID string `json:"socket_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(f.Data), &d))
	return c, d.SocketID
}

func wsSend(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(msg)))
}

func wsRead(t *testing.T, c *websocket.Conn) wsFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	var f wsFrame
	require.NoError(t, json.Unmarshal(b, &f), "frame %s", b)
	return f
}

// wsReadEvent reads until a frame of event arrives, skipping others
// (member_added and the like).
func wsReadEvent(t *testing.T, c *websocket.Conn, event string) wsFrame {
	t.Helper()
	for {
		if f := wsRead(t, c); f.Event == event {
			return f
		}
	}
}

// wsSubscribe subscribes with the auth a server SDK would give: none for
// public channels, socket_id:channel[:channel_data] signed otherwise.
func wsSubscribe(t *testing.T, c *websocket.Conn, socketID, channel, channelData string) {
	t.Helper()
	authValue := ""
	if socketID != "" {
		authValue = e2eAppKey + ":" + auth.Sign(e2eAppSecret, auth.ChannelAuthString(socketID, channel, channelData))
	}
	msg, err := json.Marshal(map[string]any{"event": protocol.EventSubscribe,
		"data": map[string]string{"channel": channel, "auth": authValue, "channel_data": channelData}})
	require.NoError(t, err)
	wsSend(t, c, string(msg))
	f := wsReadEvent(t, c, protocol.EventSubscriptionSucceeded)
	require.Equal(t, channel, f.Channel)
}

// wsSignin connects and signs in as user (pusher:signin).
func wsSignin(t *testing.T, addr, user string) *websocket.Conn {
	t.Helper()
	c, id := wsConnect(t, addr)
	userData := `{"id":"` + user + `"}`
	msg, err := json.Marshal(map[string]any{"event": protocol.EventSignin,
		"data": map[string]string{"auth": e2eAppKey + ":" + auth.Sign(e2eAppSecret, id+"::user::"+userData), "user_data": userData}})
	require.NoError(t, err)
	wsSend(t, c, string(msg))
	wsReadEvent(t, c, protocol.EventSigninSuccess)
	return c
}

// wsCloseStatus reads until the server closes c and returns the close code.
func wsCloseStatus(t *testing.T, c *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wsWait)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			require.NoError(t, ctx.Err(), "the server did not close the connection")
			return websocket.CloseStatus(err)
		}
	}
}
