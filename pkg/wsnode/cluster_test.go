package wsnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
)

func (n *testNode) requireUsers(t *testing.T, app, channel string, want int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := n.store.UserCount(context.Background(), app, channel)
		require.NoError(c, err)
		assert.Equal(c, want, got)
	}, wait, tick)
}

func (n *testNode) requireChannel(t *testing.T, app, channel string, want int64) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := n.store.Channel(context.Background(), app, channel)
		require.NoError(c, err)
		assert.Equal(c, want, got)
	}, wait, tick)
}

// waitSubscribed waits until want nodes are subscribed in Redis to the
// channel's topic (fanout's doc names it <prefix>:{app}:ev:<channel>): events
// published before that are lost for a node, as with Pusher.
func (n *testNode) waitSubscribed(t *testing.T, app, channel string, want int64) {
	t.Helper()
	rdb := n.redis.Client(t)
	topic := keyspace.Space{}.App(app) + "ev:" + channel
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := rdb.PubSubNumSub(context.Background(), topic).Result()
		require.NoError(c, err)
		assert.Equal(c, want, got[topic])
	}, wait, tick)
}

func clientEvent(channel, event, data string) string {
	return `{"event":"` + event + `","channel":"` + channel + `","data":` + data + `}`
}

// TestPresenceAcrossNodes: a user on two nodes is one member; the member
// list on subscribe is the cluster's; member_added goes out only for a
// user's first socket and member_removed only for their last, and the
// other node's subscribers see both.
func TestPresenceAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	const ch = "presence-room"

	obs, obsID := b.connect(t)
	p := subscribePresence(t, obs, obsID, ch, "obs", `{"name":"Obs"}`)
	require.Equal(t, []string{"obs"}, p.IDs)
	require.JSONEq(t, `{"name":"Obs"}`, string(p.Hash["obs"]))
	a.requireUsers(t, appID, ch, 1)
	b.waitSubscribed(t, appID, ch, 1)

	// u1's first socket, on the other node: its list includes obs.
	a1, a1ID := a.connect(t)
	p = subscribePresence(t, a1, a1ID, ch, "u1", `{"name":"U1"}`)
	require.ElementsMatch(t, []string{"obs", "u1"}, p.IDs)
	require.Equal(t, 2, p.Count)
	f := read(t, obs)
	require.Equal(t, "pusher_internal:member_added", f.Event, f.raw)
	require.Equal(t, ch, f.Channel)
	require.Equal(t, "u1", f.data(t)["user_id"])
	require.Equal(t, map[string]any{"name": "U1"}, f.data(t)["user_info"])

	// u1's second socket, on obs's node: no member_added, counted once.
	b2, b2ID := b.connect(t)
	p = subscribePresence(t, b2, b2ID, ch, "u1", `{"name":"U1"}`)
	require.ElementsMatch(t, []string{"obs", "u1"}, p.IDs)
	a.requireChannel(t, appID, ch, 3)
	a.requireUsers(t, appID, ch, 2)
	members, err := a.store.Members(context.Background(), appID, ch)
	require.NoError(t, err)
	require.Len(t, members, 2)

	// u1's first socket leaves: u1 is still a member through b2.
	require.NoError(t, a1.Close(websocket.StatusNormalClosure, ""))
	a.requireChannel(t, appID, ch, 2)
	a.requireUsers(t, appID, ch, 2)
	// A client event from b2 is the next thing obs sees: no member_added
	// for b2's join and no member_removed for a1's leave came before it.
	send(t, b2, clientEvent(ch, "client-marker", `{"n":1}`))
	f = read(t, obs)
	require.Equal(t, "client-marker", f.Event, f.raw)
	require.Equal(t, "u1", f.UserID, "client events on presence channels carry the sender's user_id")
	require.Equal(t, `{"n":1}`, *f.Data)

	// u1's last socket leaves: member_removed.
	require.NoError(t, b2.Close(websocket.StatusNormalClosure, ""))
	f = read(t, obs)
	require.Equal(t, "pusher_internal:member_removed", f.Event, f.raw)
	require.Equal(t, map[string]any{"user_id": "u1"}, f.data(t))
	a.requireUsers(t, appID, ch, 1)
}

// TestPresenceMemberListIncludesUnflushedLocalMembers: two sockets on one
// node join back to back; the second's list has the first even if the
// first's join has not reached Redis yet.
func TestPresenceMemberListIncludesUnflushedLocalMembers(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c1, id1 := n.connect(t)
	c2, id2 := n.connect(t)
	subscribePresence(t, c1, id1, "presence-x", "1", `{}`)
	p := subscribePresence(t, c2, id2, "presence-x", "2", `null`)
	require.ElementsMatch(t, []string{"1", "2"}, p.IDs)
	require.Equal(t, "null", string(p.Hash["2"]))
}

func TestPresenceLimitsAndNumericIDs(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	refused := func(c *websocket.Conn, id, cd, msg string) {
		t.Helper()
		send(t, c, subscribeFrame("presence-lim", signKey(limitKey, id+":presence-lim:"+cd), cd))
		f := readSkippingMembers(t, c)
		require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
		require.Equal(t, "LimitReached", f.data(t)["type"], f.raw)
		require.Contains(t, f.data(t)["error"], msg)
	}
	c1, id1 := n.connectKey(t, limitKey)
	c2, id2 := n.connectKey(t, limitKey)
	// A numeric user_id is the same user as its string form.
	p := subscribePresenceKey(t, c1, limitKey, id1, "presence-lim", `{"user_id":10,"user_info":{"name":"Mr. Channels"}}`)
	require.Equal(t, []string{"10"}, p.IDs)
	refused(c2, id2, `{"user_id":"`+strings.Repeat("x", 129)+`"}`, "user_id is 129 characters")
	refused(c2, id2, `{"user_id":"2","user_info":"`+strings.Repeat("x", 200)+`"}`, "user_info is")
	p = subscribePresenceKey(t, c2, limitKey, id2, "presence-lim", `{"user_id":"2"}`)
	require.ElementsMatch(t, []string{"10", "2"}, p.IDs)
	n.requireUsers(t, limitAppID, "presence-lim", 2)

	// The channel is full (limit 2) for a third user, not for a member's
	// other socket.
	c3, id3 := n.connectKey(t, limitKey)
	refused(c3, id3, `{"user_id":"4"}`, "limit was reached: 2")
	p = subscribePresenceKey(t, c3, limitKey, id3, "presence-lim", `{"user_id":"2"}`)
	require.ElementsMatch(t, []string{"10", "2"}, p.IDs)
	// Room again once a member leaves, and their subscribe's hold on the
	// seat (the app's grace, 1 s) has ended.
	require.NoError(t, c1.Close(websocket.StatusNormalClosure, ""))
	n.requireUsers(t, limitAppID, "presence-lim", 1)
	c4, id4 := n.connectKey(t, limitKey)
	cd := `{"user_id":"4"}`
	deadline := time.Now().Add(wait)
	for {
		send(t, c4, subscribeFrame("presence-lim", signKey(limitKey, id4+":presence-lim:"+cd), cd))
		f := readSkippingMembers(t, c4)
		if f.Event == "pusher_internal:subscription_succeeded" {
			require.ElementsMatch(t, []string{"2", "4"}, f.presence(t).IDs)
			break
		}
		require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
		require.True(t, time.Now().Before(deadline), "no room after a member left")
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientEventsAcrossNodes: relayed to every other subscriber on every
// node, as a JSON string, never echoed, rate limited with 4301.
func TestClientEventsAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	const ch = "private-chat"
	sender, sid := a.connect(t)
	local, lid := a.connect(t)
	remote, rid := b.connect(t)
	subscribePrivate(t, sender, sid, ch)
	subscribePrivate(t, local, lid, ch)
	subscribePrivate(t, remote, rid, ch)
	b.waitSubscribed(t, appID, ch, 2)

	send(t, sender, clientEvent(ch, "client-typing", `{"text":"hi \"there\""}`))
	for _, c := range []*websocket.Conn{remote, local} {
		f := read(t, c)
		require.Equal(t, "client-typing", f.Event, f.raw)
		require.Equal(t, ch, f.Channel)
		require.Equal(t, map[string]any{"text": `hi "there"`}, f.data(t))
		require.Empty(t, f.UserID, "no user_id on private channels")
	}
	// local got it, so any echo to sender was queued before this pong.
	pingPong(t, sender)

	// Rate limit: 10 per second per socket; the excess gets 4301 and the
	// socket stays open.
	const burst = 30
	for i := range burst {
		send(t, sender, clientEvent(ch, "client-burst", fmt.Sprint(i)))
	}
	send(t, sender, `{"event":"pusher:ping","data":{}}`)
	limited := 0
	for {
		f := read(t, sender)
		if f.Event == "pusher:pong" {
			break
		}
		require.Equal(t, "pusher:error", f.Event, f.raw)
		require.Equal(t, 4301.0, f.data(t)["code"], f.raw)
		limited++
	}
	require.GreaterOrEqual(t, limited, burst-21, "at most 10 per second (and one refill)")
	relayed := burst - limited
	for i := range relayed {
		f := read(t, remote)
		require.Equal(t, "client-burst", f.Event)
		require.Equal(t, fmt.Sprint(i), *f.Data, "in order")
	}
}

// TestClientEventsKeptInHistory: on a channel with a history, a client
// event is relayed as before and recorded, with the sender's user id on
// presence channels, in the order subscribers received it.
func TestClientEventsKeptInHistory(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	const ch = "private-chat-kept"
	sender, sid := a.connect(t)
	remote, rid := b.connect(t)
	subscribePrivate(t, sender, sid, ch)
	subscribePrivate(t, remote, rid, ch)
	b.waitSubscribed(t, appID, ch, 2)
	for i := range 3 {
		send(t, sender, clientEvent(ch, "client-n", fmt.Sprint(i)))
		f := read(t, remote)
		require.Equal(t, "client-n", f.Event, f.raw)
		require.Equal(t, fmt.Sprint(i), *f.Data)
	}
	kept, err := history.New(a.redis.Client(t), history.Options{}).Last(context.Background(), appID, ch, 10)
	require.NoError(t, err)
	require.Len(t, kept, 3)
	for i, e := range kept {
		require.Equal(t, history.Event{Serial: e.Serial, Event: "client-n", Data: fmt.Sprint(i)}, e)
	}
}

func TestClientEventsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	// An app without client messages.
	c, id := n.connectKey(t, noClientKey)
	subscribePrivateKey(t, c, noClientKey, id, "private-x")
	send(t, c, clientEvent("private-x", "client-a", `{}`))
	f := read(t, c)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Contains(t, f.data(t)["message"], "enable client messages")

	// Over the app's payload limit (0.1 KB).
	l, lid := n.connectKey(t, limitKey)
	subscribePrivateKey(t, l, limitKey, lid, "private-x")
	send(t, l, clientEvent("private-x", "client-a", `"`+strings.Repeat("x", 200)+`"`))
	f = read(t, l)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Contains(t, f.data(t)["message"], "over the limit")
	pingPong(t, l)
}

// TestSigninAndUserChannel covers pusher:signin, #server-to-user- and a
// presence subscription that takes its member from the signin.
func TestSigninAndUserChannel(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	c, id := a.connect(t)
	userData := `{"id":"7","user_info":{"name":"Seven"}}`
	signin := func(c *websocket.Conn, id, userData string) frame {
		b, _ := json.Marshal(map[string]any{"event": "pusher:signin",
			"data": map[string]string{"auth": sign(id + "::user::" + userData), "user_data": userData}})
		send(t, c, string(b))
		return read(t, c)
	}
	f := signin(c, id, userData)
	require.Equal(t, "pusher:signin_success", f.Event, f.raw)
	require.Equal(t, map[string]any{"user_data": userData}, f.data(t))

	send(t, c, subscribeFrame("#server-to-user-8", "", ""))
	f = read(t, c)
	require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
	require.Equal(t, "AuthError", f.data(t)["type"])
	subscribe(t, c, "#server-to-user-7")
	a.waitSubscribed(t, appID, "#server-to-user-7", 1)

	// Signing in again as someone else is refused; as the same user is fine.
	f = signin(c, id, `{"id":"8"}`)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Equal(t, 4009.0, f.data(t)["code"])
	require.Contains(t, f.data(t)["message"], "already signed in")
	require.Equal(t, "pusher:signin_success", signin(c, id, userData).Event)
	// A bad signature is refused.
	send(t, c, `{"event":"pusher:signin","data":{"auth":"`+appKey+`:00","user_data":"{\"id\":\"7\"}"}}`)
	f = read(t, c)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Contains(t, f.data(t)["message"], "Invalid signature")

	// Presence without channel_data: the member is the signed-in user.
	send(t, c, subscribeFrame("presence-signed", sign(id+":presence-signed"), ""))
	f = read(t, c)
	require.Equal(t, "pusher_internal:subscription_succeeded", f.Event, f.raw)
	p := f.presence(t)
	require.Equal(t, []string{"7"}, p.IDs)
	require.JSONEq(t, `{"name":"Seven"}`, string(p.Hash["7"]))
	a.requireUsers(t, appID, "presence-signed", 1)

	// An event for the user, published on the other node, arrives.
	publish(t, b, appID, fanout.Message{Channel: "#server-to-user-7", Event: "notice", Data: `{"x":1}`})
	f = read(t, c)
	require.Equal(t, "notice", f.Event, f.raw)
	require.Equal(t, "#server-to-user-7", f.Channel)
	require.Equal(t, `{"x":1}`, *f.Data)
}

// TestEncryptedChannelRelay: the server authorizes private-encrypted-
// channels like private ones and relays the ciphertext untouched.
func TestEncryptedChannelRelay(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	c, id := b.connect(t)
	subscribePrivate(t, c, id, "private-encrypted-x")
	b.waitSubscribed(t, appID, "private-encrypted-x", 1)
	data := `{"nonce":"bm9uY2Vub25jZW5vbmNlbm9uY2Vub25j","ciphertext":"Y2lwaGVydGV4dA=="}`
	publish(t, a, appID, fanout.Message{Channel: "private-encrypted-x", Event: "secret", Data: data})
	f := read(t, c)
	require.Equal(t, "secret", f.Event, f.raw)
	require.Equal(t, data, *f.Data)
}

func TestSubscriptionCount(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c1, _ := n.connectKey(t, countKey)
	c2, _ := n.connectKey(t, countKey)
	early := map[*websocket.Conn][]frame{c1: subscribeCounted(t, c1, "room")}
	// The first count may be published before the node's subscription to
	// the channel reaches Redis (and then is lost, as with Pusher).
	n.waitSubscribed(t, countAppID, "room", 1)
	early[c2] = subscribeCounted(t, c2, "room")
	for _, c := range []*websocket.Conn{c1, c2} {
		for {
			var f frame
			if len(early[c]) > 0 {
				f, early[c] = early[c][0], early[c][1:]
			} else {
				f = readEvent(t, c, "pusher_internal:subscription_count")
			}
			require.Equal(t, "room", f.Channel)
			if f.data(t)["subscription_count"] == 2.0 {
				break
			}
			require.Equal(t, map[string]any{"subscription_count": 1.0}, f.data(t))
		}
	}
}

func TestConnectionLimit(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c1, _ := n.connectKey(t, limitKey)
	n.connectKey(t, limitKey)
	n.connectKey(t, limitKey)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := n.store.Connections(context.Background(), limitAppID)
		require.NoError(c, err)
		assert.Equal(c, int64(3), got)
	}, wait, tick)

	over := dial(t, n.url(limitKey, pusherJSQuery))
	f := read(t, over)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Equal(t, 4004.0, f.data(t)["code"])
	require.Equal(t, websocket.StatusCode(4004), closeStatus(t, over))
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "connection_limit"))

	// Room again once one leaves.
	require.NoError(t, c1.Close(websocket.StatusNormalClosure, ""))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := n.store.Connections(context.Background(), limitAppID)
		require.NoError(c, err)
		assert.Equal(c, int64(2), got)
	}, wait, tick)
	n.connectKey(t, limitKey)
}

// TestSlowConsumerIsDisconnected: a client that never reads is cut once
// its queue fills, while another subscriber of the same channel gets every
// message in order, and delivery never blocks.
func TestSlowConsumerIsDisconnected(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	n := startNode(t).run(t)
	slow := dialRawWith(t, smallReceiveBuffer, n.Addr(), "/app/"+appKey+pusherJSQuery)
	require.Contains(t, slow.read(t), "pusher:connection_established")
	slow.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"flood"}}`)
	require.Contains(t, slow.read(t), "subscription_succeeded")
	fast, _ := n.connect(t)
	subscribe(t, fast, "flood")

	got := make(chan int, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer close(got)
		for {
			_, b, err := fast.Read(ctx)
			if err != nil {
				return
			}
			var f struct{ Data string }
			if json.Unmarshal(b, &f) != nil {
				return
			}
			var i int
			_, _ = fmt.Sscanf(f.Data, `{"i":%d`, &i)
			got <- i
		}
	}()

	pad := strings.Repeat("x", 4<<10)
	const batch = 32
	sent := 0
	for round := 0; round < 200 && metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total") == 0; round++ {
		start := time.Now()
		for range batch {
			n.Deliver(appID, fanout.Message{Channel: "flood", Event: "e", Data: fmt.Sprintf(`{"i":%d,"pad":"%s"}`, sent, pad)})
			sent++
		}
		require.Less(t, time.Since(start), time.Second, "delivery blocked")
		// Pace to the fast reader so only the slow one falls behind.
		for want := sent - batch; want < sent; want++ {
			select {
			case i := <-got:
				require.Equal(t, want, i, "fast subscriber got messages out of order")
			case <-time.After(wait):
				t.Fatalf("fast subscriber stalled at message %d", want)
			}
		}
	}
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_slow_consumers_total"), "slow consumer never cut after %d messages", sent)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_connections_open"))
	}, wait, tick)
	n.requireCounts(t, map[string]int64{"flood": 1})
}

// publish sends m through a node's own event bus, as the HTTP API would.
func publish(t *testing.T, n *testNode, app string, m fanout.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	require.NoError(t, n.Publish(ctx, app, m))
}

// countWatcher reads a socket's frames in the background and keeps the
// last subscription_count it got and when its last frame came.
type countWatcher struct {
	mu     sync.Mutex
	last   float64
	frames int
	at     time.Time
}

func watchCounts(t *testing.T, c *websocket.Conn) *countWatcher {
	w := &countWatcher{last: -1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var f struct {
				Event string `json:"event"`
				Data  string `json:"data"`
			}
			if json.Unmarshal(b, &f) != nil || f.Event != "pusher_internal:subscription_count" {
				continue
			}
			var d map[string]float64
			_ = json.Unmarshal([]byte(f.Data), &d)
			w.mu.Lock()
			w.last, w.frames, w.at = d["subscription_count"], w.frames+1, time.Now()
			w.mu.Unlock()
		}
	}()
	return w
}

// settled reports the last count, if no count came in the last quiet.
func (w *countWatcher) settled(quiet time.Duration) (float64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, time.Since(w.at) >= quiet
}

// TestLastSubscriptionCountIsRedis: each node announces the count its own
// flush returned, so after a mass leave spread over two nodes the two
// announcements race; the last count every subscriber gets must still be
// the count in Redis, however they arrive, once changes stop.
func TestLastSubscriptionCountIsRedis(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	const ch, rounds, leavers = "room", 20, 30
	obsA, _ := a.connectKey(t, countKey)
	obsB, _ := b.connectKey(t, countKey)
	subscribeCounted(t, obsA, ch)
	subscribeCounted(t, obsB, ch)
	a.waitSubscribed(t, countAppID, ch, 2)
	watchers := []*countWatcher{watchCounts(t, obsA), watchCounts(t, obsB)}
	for round := range rounds {
		conns := make([]*websocket.Conn, leavers)
		for i := range conns {
			n := []*testNode{a, b}[i%2]
			conns[i], _ = n.connectKey(t, countKey)
			// Counts of the others' subscribes may come before the reply.
			send(t, conns[i], `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)
			readEvent(t, conns[i], "pusher_internal:subscription_succeeded")
		}
		a.requireChannel(t, countAppID, ch, leavers+2)
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Go(func() { _ = c.CloseNow() })
		}
		wg.Wait()
		a.requireChannel(t, countAppID, ch, 2)
		for i, w := range watchers {
			require.Eventually(t, func() bool {
				last, quiet := w.settled(300 * time.Millisecond)
				return quiet && last == 2
			}, wait, tick, "round %d: observer %d's last subscription_count is not Redis's 2 (got %v)", round, i, func() float64 { l, _ := w.settled(0); return l }())
		}
	}
}
