package wsnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/wsclient"
	"github.com/headcount/headcount/pkg/wsnode"
)

// startNodesOnCluster builds n nodes sharing a 3-master Redis Cluster.
func startNodesOnCluster(t *testing.T, n int) []*testNode {
	t.Helper()
	cl := redistest.NewCluster(t)
	nodes := make([]*testNode, n)
	for i := range nodes {
		cfg := config.WSNode{
			Common: config.Common{
				RedisCluster: cl.Seeds(), AdminAddr: "127.0.0.1:0",
				LogLevel: "debug", LogFormat: "text", Apps: testApps(t),
			},
			Addr:      "127.0.0.1:0",
			NodeID:    fmt.Sprintf("node-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), i),
			Heartbeat: 100 * time.Millisecond,
			Drain:     200 * time.Millisecond,
		}
		nd := &testNode{cluster: cl, reg: prometheus.NewRegistry(), cfg: cfg, store: counts.NewStore(cl.Client(t), keyspace.Space{}), done: make(chan error, 1)}
		var err error
		nd.App, err = wsnode.New(wsnode.Options{Config: cfg, Logger: logging.TestLogger(t), Registry: nd.reg})
		require.NoError(t, err)
		nodes[i] = nd
	}
	return nodes
}

// rawFrame is a server frame as a raw client reads it.
type rawFrame struct {
	Event   string `json:"event"`
	Channel string `json:"channel"`
	Data    string `json:"data"`
}

func parseRaw(t *testing.T, p string) rawFrame {
	t.Helper()
	var f rawFrame
	require.NoError(t, json.Unmarshal([]byte(p), &f), p)
	return f
}

// readReply reads r's frames until one that is not a presence member
// event (other sockets' joins send those at any time).
func (r *rawConn) readReply(t *testing.T) rawFrame {
	t.Helper()
	for {
		f := parseRaw(t, r.read(t))
		if !strings.HasPrefix(f.Event, "pusher_internal:member_") {
			return f
		}
	}
}

// connectRaw dials app-1 on n with a raw client and returns it and its
// socket id.
func (n *testNode) connectRaw(t *testing.T, key string) (*rawConn, string) {
	t.Helper()
	c := dialRaw(t, n.Addr(), "/app/"+key+pusherJSQuery)
	f := parseRaw(t, c.read(t))
	require.Equal(t, "pusher:connection_established", f.Event)
	var d struct {
		SocketID string `json:"socket_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(f.Data), &d))
	return c, d.SocketID
}

// TestPresenceMemberLimitIsExact: 240 distinct signed users join an empty
// presence channel of app-1 (maxPresenceMembersPerChannel 100 by default)
// at once, half on each of two nodes: exactly 100 become members, the
// other 140 are refused with soketi's LimitReached 4100, and Redis ends
// with 100 members.
func TestPresenceMemberLimitIsExact(t *testing.T) {
	t.Parallel()
	t.Run("single", func(t *testing.T) { memberLimitRace(t, startNodes(t, 2)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("cluster in -short")
		}
		memberLimitRace(t, startNodesOnCluster(t, 2))
	})
}

func memberLimitRace(t *testing.T, nodes []*testNode) {
	for _, n := range nodes {
		n.run(t)
	}
	const users, limit, ch = 240, 100, "presence-crowd"
	conns := make([]*rawConn, users)
	frames := make([]string, users)
	for i := range conns {
		var id string
		conns[i], id = nodes[i%2].connectRaw(t, appKey)
		cd := fmt.Sprintf(`{"user_id":"u%d","user_info":{"name":"User %d"}}`, i, i)
		frames[i] = subscribeFrame(ch, sign(id+":"+ch+":"+cd), cd)
	}
	// Every subscribe is on the wire before the first answer is read.
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Send(frames[i])
		}()
	}
	wg.Wait()
	joined, refused := 0, 0
	for _, c := range conns {
		f := c.readReply(t)
		switch f.Event {
		case "pusher_internal:subscription_succeeded":
			joined++
		case "pusher:subscription_error":
			refused++
			var d struct {
				Type   string `json:"type"`
				Error  string `json:"error"`
				Status int    `json:"status"`
			}
			require.NoError(t, json.Unmarshal([]byte(f.Data), &d))
			require.Equal(t, "LimitReached", d.Type, f.Data)
			require.Equal(t, 4100, d.Status, f.Data)
			require.Contains(t, d.Error, "maximum members per presence channel", f.Data)
		default:
			t.Fatalf("unexpected answer %+v", f)
		}
	}
	t.Logf("%d joined, %d refused", joined, refused)
	require.Equal(t, limit, joined, "members admitted")
	require.Equal(t, users-limit, refused)
	nodes[0].requireUsers(t, appID, ch, limit)
}

// hgetalls counts the HGETALL commands Redis has run (the member list is
// two of them), from INFO commandstats.
func hgetalls(t *testing.T, n *testNode) int {
	t.Helper()
	info, err := n.redis.Client(t).Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_hgetall:calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			v, err := strconv.Atoi(calls)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// TestRefusedAndRepeatedPresenceSubscribesReadNoMembers: a user refused
// for the member limit, and a repeated subscribe of a socket already on
// the channel, cost no read of the member list. The repeat is answered as
// Pusher does, without the list, and leaves the subscription as it was.
func TestRefusedAndRepeatedPresenceSubscribesReadNoMembers(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	const ch = "presence-full"
	c1, id1 := n.connectKey(t, limitKey)
	c2, id2 := n.connectKey(t, limitKey)
	subscribePresenceKey(t, c1, limitKey, id1, ch, `{"user_id":"1"}`)
	subscribePresenceKey(t, c2, limitKey, id2, ch, `{"user_id":"2","user_info":{"name":"Two"}}`)
	n.requireUsers(t, limitAppID, ch, 2)
	before := hgetalls(t, n)

	c3, id3 := n.connectKey(t, limitKey)
	cd := `{"user_id":"3"}`
	send(t, c3, subscribeFrame(ch, signKey(limitKey, id3+":"+ch+":"+cd), cd))
	f := read(t, c3)
	require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
	require.EqualValues(t, 4100, f.data(t)["status"], f.raw)

	cd = `{"user_id":"2","user_info":{"name":"Two"}}`
	send(t, c2, subscribeFrame(ch, signKey(limitKey, id2+":"+ch+":"+cd), cd))
	f = readSkippingMembers(t, c2)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Equal(t, map[string]any{"code": nil, "message": "Existing subscription to channel " + ch}, f.data(t))
	require.Equal(t, before, hgetalls(t, n), "the member list was read")
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "already_subscribed"))

	// Still subscribed, once: a client event reaches the other member.
	send(t, c2, clientEvent(ch, "client-hi", `{}`))
	f = readSkippingMembers(t, c1)
	require.Equal(t, "client-hi", f.Event, f.raw)
	n.requireChannel(t, limitAppID, ch, 2)
}

// closeCode is the code of a close frame's payload, or 0 if p is not one
// (every other frame of the node is a JSON object).
func closeCode(p string) int {
	if len(p) < 2 || p[0] == '{' {
		return 0
	}
	return int(p[0])<<8 | int(p[1])
}

// TestFrameFloodIsClosed: a client that sends frames faster than any
// pusher-js does is told with pusher:error 4100 and closed with 4100
// (pusher-js backs off a second, then reconnects), having been answered
// no more than its burst and a second's refill.
func TestFrameFloodIsClosed(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, appKey)
	const flood = 5000
	var b []byte
	for range flood {
		b = append(b, wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)...)
	}
	_, err := c.Write(b)
	require.NoError(t, err)
	pongs, errored := 0, false
	for {
		p, err := c.Read(wait)
		require.NoError(t, err, "no close after %d pongs", pongs)
		if code := closeCode(p); code != 0 {
			require.Equal(t, 4100, code, "close frame %q", p)
			_, err := c.Write([]byte{0x88, 0x82, 0, 0, 0, 0, p[0], p[1]}) // the client's close
			require.NoError(t, err)
			break
		}
		f := parseRaw(t, p)
		switch f.Event {
		case "pusher:pong":
			pongs++
		case "pusher:error":
			require.Contains(t, f.Data, `"code":4100`)
			require.Contains(t, f.Data, "frames per second")
			errored = true
		default:
			t.Fatalf("unexpected frame %s", p)
		}
	}
	require.True(t, errored, "closed without a pusher:error")
	t.Logf("%d pongs before the close", pongs)
	require.Less(t, pongs, 2*(3*1000+20), "the burst and a refill")
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "frame_rate"))
}

// TestPusherJSReconnectBurstFits: what pusher-js sends on a reconnect, all
// at once (a signin, a subscribe for each channel up to the most a
// connection may hold, a ping), then unsubscribing from every channel and
// subscribing to each again in the same second, passes.
func TestPusherJSReconnectBurstFits(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, id := n.connectRaw(t, wideKey)
	const channels = wideChannels
	ud := `{"id":"7"}`
	b, err := json.Marshal(map[string]any{"event": "pusher:signin", "data": map[string]string{"user_data": ud, "auth": signKey(wideKey, id+"::user::"+ud)}})
	require.NoError(t, err)
	burst := wsclient.TextFrame(string(b))
	for i := range channels {
		burst = append(burst, wsclient.TextFrame(fmt.Sprintf(`{"event":"pusher:subscribe","data":{"auth":"","channel":"c%d"}}`, i))...)
	}
	for i := range channels {
		burst = append(burst, wsclient.TextFrame(fmt.Sprintf(`{"event":"pusher:unsubscribe","data":{"channel":"c%d"}}`, i))...)
		burst = append(burst, wsclient.TextFrame(fmt.Sprintf(`{"event":"pusher:subscribe","data":{"auth":"","channel":"c%d"}}`, i))...)
	}
	burst = append(burst, wsclient.TextFrame(`{"event":"pusher:ping","data":{}}`)...)
	_, err = c.Write(burst)
	require.NoError(t, err)
	succeeded := 0
	for {
		f := parseRaw(t, c.read(t))
		if f.Event == "pusher:pong" {
			break
		}
		switch f.Event {
		case "pusher_internal:subscription_succeeded":
			succeeded++
		case "pusher:signin_success", "pusher:cache_miss":
		default:
			t.Fatalf("unexpected frame %+v", f)
		}
	}
	require.Equal(t, 2*channels, succeeded)
	c.send(t, `{"event":"pusher:ping","data":{}}`)
	require.Equal(t, `{"event":"pusher:pong","data":"{}"}`, c.read(t))
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "frame_rate"))
}

// TestABusyPageIsServedWhole: a page of 300 channels (a dashboard, a
// trading screen) subscribes to all of them at once on the default cap, as
// Pusher and soketi, which set no cap, serve it.
func TestABusyPageIsServedWhole(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, appKey)
	succeeded := subscribeBurst(t, c, "page", 300)
	require.Equal(t, 300, succeeded)
}

// TestOverCapBurstIsRefusedNotCut: a page of more channels than the default
// cap, on an app whose connections may hold 3, sends all of them on every
// reconnect, as pusher-js does: those past the cap are refused and the
// connection stays, so pusher-js does not reconnect in a loop.
func TestOverCapBurstIsRefusedNotCut(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, capKey)
	succeeded := subscribeBurst(t, c, "p", apps.DefaultMaxChannelsPerConnection+100)
	require.Equal(t, 3, succeeded)
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "frame_rate"))
}

// subscribeBurst sends channels subscribes to prefix0, prefix1, ... in one
// write, reads an answer to each, and returns how many succeeded; the rest
// must be refused with LimitReached, and the socket must still answer.
func subscribeBurst(t *testing.T, c *rawConn, prefix string, channels int) (succeeded int) {
	t.Helper()
	var burst []byte
	for i := range channels {
		burst = append(burst, wsclient.TextFrame(fmt.Sprintf(`{"event":"pusher:subscribe","data":{"auth":"","channel":"%s%d"}}`, prefix, i))...)
	}
	_, err := c.Write(burst)
	require.NoError(t, err)
	for range channels {
		f := parseRaw(t, c.read(t))
		if f.Event == "pusher_internal:subscription_succeeded" {
			succeeded++
			continue
		}
		typ, _, _ := subscriptionRefusal(t, f)
		require.Equal(t, "LimitReached", typ)
	}
	c.send(t, `{"event":"pusher:ping","data":{}}`)
	require.Equal(t, `{"event":"pusher:pong","data":"{}"}`, c.read(t))
	return succeeded
}

// subscriptionRefusal decodes a pusher:subscription_error's data.
func subscriptionRefusal(t *testing.T, f rawFrame) (typ, msg string, status int) {
	t.Helper()
	require.Equal(t, "pusher:subscription_error", f.Event, "%+v", f)
	var d struct {
		Type   string `json:"type"`
		Error  string `json:"error"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(f.Data), &d))
	return d.Type, d.Error, d.Status
}

// TestChannelsPerConnection: a connection of app-cap may hold 3 channels
// (its maxChannelsPerConnection); a fourth is refused, and room comes back
// when it leaves one.
func TestChannelsPerConnection(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	c, _ := n.connectRaw(t, capKey)
	sub := func(ch string) rawFrame {
		c.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)
		return parseRaw(t, c.read(t))
	}
	for _, ch := range []string{"a", "b", "c"} {
		require.Equal(t, "pusher_internal:subscription_succeeded", sub(ch).Event)
	}
	typ, msg, status := subscriptionRefusal(t, sub("d"))
	require.Equal(t, "LimitReached", typ)
	require.Equal(t, 400, status)
	require.Contains(t, msg, "already subscribed to 3 channels, its limit (maxChannelsPerConnection)")
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_errors_total", "reason", "channel_limit"))
	c.send(t, `{"event":"pusher:unsubscribe","data":{"channel":"a"}}`)
	require.Equal(t, "pusher_internal:subscription_succeeded", sub("d").Event)
}

// TestAppChannelLimit: app-few may hold 20 channels occupied at once. 60
// subscribes to distinct new channels at once, over two nodes, open at most
// 20 and a channel a node more; a node opens its share of the room at
// once, so a burst may open fewer, and the rest is opened as its view of
// the count is read again (appChannels). Past the cap, new channels are
// refused; a channel occupied on the other node is no new channel and may
// still be joined; vacated channels make room.
func TestAppChannelLimit(t *testing.T) {
	// Not parallel: its bound holds while a flush lands within flushMargin
	// (100 ms), which tests beside it can delay past that under -race (24
	// opened against a bound of 22, in CI).
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.run(t)
	}
	const sockets, limit = 30, 20
	conns := make([]*rawConn, sockets)
	var burst [sockets][]byte
	for i := range conns {
		conns[i], _ = nodes[i%2].connectRaw(t, fewKey)
		for j := range 2 {
			burst[i] = append(burst[i], wsclient.TextFrame(fmt.Sprintf(`{"event":"pusher:subscribe","data":{"auth":"","channel":"c%d-%d"}}`, i, j))...)
		}
	}
	// Each node shares the room among the nodes that have written counts
	// for the app: both have, once their sockets' connections are flushed.
	require.Eventually(t, func() bool {
		l, err := nodes[0].store.ChannelLoad(context.Background(), fewAppID, nodes[0].cfg.NodeID, "")
		return err == nil && l.Nodes == 2
	}, wait, tick)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Write(burst[i])
		}()
	}
	wg.Wait()
	opened := map[string]int{} // channel -> socket
	refused := 0
	for i, c := range conns {
		for range 2 {
			f := parseRaw(t, c.read(t))
			if f.Event == "pusher_internal:subscription_succeeded" {
				opened[f.Channel] = i
				continue
			}
			typ, msg, status := subscriptionRefusal(t, f)
			require.Equal(t, "LimitReached", typ)
			require.Equal(t, 403, status)
			require.Contains(t, msg, "its limit (maxChannels) is 20")
			refused++
		}
	}
	t.Logf("the burst opened %d channels, %d refused", len(opened), refused)
	require.GreaterOrEqual(t, len(opened), limit/len(nodes), "less than a node's share")
	require.LessOrEqual(t, len(opened), limit+len(nodes), "over the cap by more than a channel a node")
	require.Equal(t, float64(refused), metricstest.Value(t, nodes[0].reg, "headcount_wsnode_errors_total", "reason", "app_channel_limit")+
		metricstest.Value(t, nodes[1].reg, "headcount_wsnode_errors_total", "reason", "app_channel_limit"))

	// New channels from node 1, one at a time: they open while there is
	// room (at the latest once the node reads the count again, within a
	// second) and are refused for good at the cap.
	filler, _ := nodes[1].connectRaw(t, fewKey)
	lastOpened := time.Now()
	for k := 0; time.Since(lastOpened) < 3*wsnode.ChannelReadEvery; {
		ch := fmt.Sprintf("fill-%d", k)
		filler.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)
		if f := parseRaw(t, filler.read(t)); f.Event == "pusher_internal:subscription_succeeded" {
			opened[ch] = -1
			lastOpened = time.Now()
			k++
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d channels opened in all", len(opened))
	require.GreaterOrEqual(t, len(opened), limit, "refused while there was room")
	require.LessOrEqual(t, len(opened), limit+len(nodes), "over the cap by more than a channel a node")
	want := map[string]int64{}
	for ch := range opened {
		want[ch] = 1
	}
	requireAppCounts(t, nodes[0], fewAppID, want)

	// A channel occupied on node 0 may be joined from node 1 at the cap.
	var joinable string
	for ch, i := range opened {
		if i >= 0 && i%2 == 0 {
			joinable = ch
			break
		}
	}
	other, _ := nodes[1].connectRaw(t, fewKey)
	other.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+joinable+`"}}`)
	require.Equal(t, "pusher_internal:subscription_succeeded", parseRaw(t, other.read(t)).Event)
	other.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"new"}}`)
	_, _, status := subscriptionRefusal(t, parseRaw(t, other.read(t)))
	require.Equal(t, 403, status)

	// Vacated channels make room again, once the node reads the count anew.
	for _, c := range append(conns, filler) {
		require.NoError(t, c.Close())
	}
	requireAppCounts(t, nodes[0], fewAppID, map[string]int64{joinable: 1})
	deadline := time.Now().Add(wait)
	for {
		other.send(t, `{"event":"pusher:subscribe","data":{"auth":"","channel":"new"}}`)
		f := parseRaw(t, other.read(t))
		if f.Event == "pusher_internal:subscription_succeeded" {
			break
		}
		subscriptionRefusal(t, f)
		require.True(t, time.Now().Before(deadline), "no room after the channels were vacated")
		time.Sleep(100 * time.Millisecond)
	}
}

// TestChannelMemory measures what one occupied channel costs: Redis memory
// (its count, the node's contribution, the node's subscription to its
// topic) and the node's heap (the subscription, the index, the bus), over
// 20 sockets of 1,000 channels each, names of 20 bytes. It runs only when
// asked, alone:
//
//	HC_MEASURE_CHANNELS=1 go test -count=1 -v -run TestChannelMemory ./pkg/wsnode/
func TestChannelMemory(t *testing.T) {
	if os.Getenv("HC_MEASURE_CHANNELS") == "" {
		t.Skip("a measurement: set HC_MEASURE_CHANNELS=1")
	}
	const sockets, perSocket = 20, apps.DefaultMaxChannelsPerConnection
	n := startNode(t).run(t)
	rdb := n.redis.Client(t)
	ctx := context.Background()
	usedMemory := func() int64 {
		info, err := rdb.Info(ctx, "memory").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				m, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				return m
			}
		}
		t.Fatal("no used_memory")
		return 0
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	conns := make([]*rawConn, sockets)
	for i := range conns {
		conns[i], _ = n.connectRaw(t, wideKey)
	}
	want := map[string]int64{}
	requireAppCounts(t, n, wideAppID, want)
	redisBefore, heapBefore := usedMemory(), heap()
	for i, c := range conns {
		var burst []byte
		for j := range perSocket {
			ch := fmt.Sprintf("measure-%05d-%06d", i, j)
			want[ch] = 1
			burst = append(burst, wsclient.TextFrame(`{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)...)
		}
		_, err := c.Write(burst)
		require.NoError(t, err)
		for range perSocket {
			require.Contains(t, c.read(t), "subscription_succeeded")
		}
	}
	requireAppCounts(t, n, wideAppID, want)
	channels := float64(sockets * perSocket)
	t.Logf("%.0f channels: Redis %.0f B each, node heap %.0f B each", channels,
		float64(usedMemory()-redisBefore)/channels, float64(heap()-heapBefore)/channels)
	runtime.KeepAlive(conns)
}
