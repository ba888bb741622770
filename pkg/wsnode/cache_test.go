package wsnode_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/cache"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/protocol"
)

// publisher publishes as the HTTP API does: a cache channel's event is
// written to its cache in the pipeline of its publish.
type publisher struct {
	bus   *fanout.Bus
	cache *cache.Store
}

func newPublisher(t *testing.T, n *testNode) *publisher {
	rdb := n.redis.Client(t)
	return &publisher{bus: fanout.New(rdb, fanout.Options{}), cache: cache.New(rdb, cache.Options{})}
}

func (p *publisher) publish(t *testing.T, app, ch, event, data string) {
	t.Helper()
	require.NoError(t, p.try(app, ch, event, data))
}

// try is publish for a goroutine other than the test's.
func (p *publisher) try(app, ch, event, data string) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return p.bus.PublishBatch(ctx, app, []fanout.Message{{Channel: ch, Event: event, Data: data}}, func(pl redis.Pipeliner, _ int) {
		if protocol.IsCacheChannel(ch) {
			p.cache.QueueSet(ctx, pl, app, ch, event, data)
		}
	})
}

// subscribeKind subscribes c to ch as its kind requires and reads the
// subscription_succeeded.
func subscribeKind(t *testing.T, c *websocket.Conn, socketID, ch string) {
	t.Helper()
	switch {
	case len(ch) > 9 && ch[:9] == "presence-":
		subscribePresence(t, c, socketID, ch, "u-"+socketID, `{}`)
	case len(ch) > 8 && ch[:8] == "private-":
		subscribePrivate(t, c, socketID, ch)
	default:
		subscribe(t, c, ch)
	}
}

// TestCacheChannelsAcrossNodes: a subscriber of a cache channel, of each
// kind, on either node, gets pusher:cache_miss right after
// subscription_succeeded while nothing is cached, and the last published
// event once one is; other channels get neither.
func TestCacheChannelsAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.run(t)
	}
	p := newPublisher(t, nodes[0])
	for _, ch := range []string{"cache-a", "private-cache-b", "private-encrypted-cache-c", "presence-cache-d"} {
		t.Run(ch, func(t *testing.T) {
			c, sid := nodes[0].connect(t)
			subscribeKind(t, c, sid, ch)
			f := read(t, c)
			require.Equal(t, `{"event":"pusher:cache_miss","channel":"`+ch+`"}`, f.raw)

			p.publish(t, appID, ch, "first", `{"n":1}`)
			require.Equal(t, "first", readSkippingMembers(t, c).Event) // live
			p.publish(t, appID, ch, "second", `{"n":2}`)
			require.Equal(t, "second", readSkippingMembers(t, c).Event)

			for _, n := range nodes {
				c2, sid2 := n.connect(t)
				subscribeKind(t, c2, sid2, ch)
				f := readSkippingMembers(t, c2)
				require.Equal(t, "second", f.Event, f.raw)
				require.Equal(t, ch, f.Channel)
				require.Equal(t, `{"n":2}`, *f.Data)
				// Nothing else came but member events.
				send(t, c2, `{"event":"pusher:ping","data":{}}`)
				require.Equal(t, "pusher:pong", readSkippingMembers(t, c2).Event)
			}
		})
	}
	t.Run("not a cache channel", func(t *testing.T) {
		p.publish(t, appID, "public-x", "e", "d")
		c, _ := nodes[1].connect(t)
		subscribe(t, c, "public-x")
		pingPong(t, c)
	})
	hits := metricstest.Value(t, nodes[0].reg, "headcount_cache_hits_total") + metricstest.Value(t, nodes[1].reg, "headcount_cache_hits_total")
	misses := metricstest.Value(t, nodes[0].reg, "headcount_cache_misses_total") + metricstest.Value(t, nodes[1].reg, "headcount_cache_misses_total")
	require.Equal(t, 8.0, hits)
	require.Equal(t, 4.0, misses)
}

// TestCachedEventNotSupersededByAnnouncements: members joining a
// presence cache channel together on both nodes each get the cached event:
// the member_added events reaching a subscriber while its cached event is
// on its way are not events the cache keeps, so they do not replace it.
func TestCachedEventNotSupersededByAnnouncements(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.run(t)
	}
	p := newPublisher(t, nodes[0])
	const ch = "presence-cache-crowd"
	p.publish(t, appID, ch, "state", `{"v":1}`)
	conns := make([]*websocket.Conn, 16)
	for i := range conns {
		c, sid := nodes[i%2].connect(t)
		conns[i] = c
		send(t, c, subscribeFrame(ch, sign(sid+":"+ch+":"+`{"user_id":"u`+strconv.Itoa(i)+`"}`), `{"user_id":"u`+strconv.Itoa(i)+`"}`))
	}
	for i, c := range conns {
		require.Equal(t, "pusher_internal:subscription_succeeded", readSkippingMembers(t, c).Event, "subscriber %d", i)
		f := readSkippingMembers(t, c)
		require.Equal(t, "state", f.Event, "subscriber %d: %s", i, f.raw)
	}
}

// TestCacheMissWebhook: subscribers finding one empty cache channel on two
// nodes make one cache_miss webhook event; apps without the webhook log
// none.
func TestCacheMissWebhook(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.run(t)
	}
	rdb := nodes[0].redis.Client(t)
	entries := func(app string) []string {
		xs, err := rdb.XRange(context.Background(), eventlog.Key(keyspace.Space{}, app), "-", "+").Result()
		require.NoError(t, err)
		var out []string
		for _, x := range xs {
			out = append(out, fmt.Sprint(x.Values["ev"]))
		}
		return out
	}
	for i := range 4 {
		c, _ := nodes[i%2].connectKey(t, cacheKey)
		subscribe(t, c, "cache-empty")
		require.Equal(t, "pusher:cache_miss", read(t, c).Event)
	}
	c, _ := nodes[0].connect(t)
	subscribe(t, c, "cache-empty")
	require.Equal(t, "pusher:cache_miss", read(t, c).Event)

	require.Eventually(t, func() bool { return len(entries(cacheAppID)) > 0 }, wait, tick)
	require.Equal(t, []string{`{"name":"cache_miss","channel":"cache-empty"}`}, entries(cacheAppID))
	require.Empty(t, entries(appID))
}

// TestCachedEventsAroundSubscribe: while events 1, 2, 3, ... are published
// on a cache channel one after another, subscribers join on both nodes.
// Each gets, from its first event on, every later event in order: none is
// lost between the cache read and live delivery, none is older than one
// before it (a cached event never follows a live one, nor do live events
// published before the cached one), and only one may come twice in a row,
// cached and then live. Its last event is the channel's last.
func TestCachedEventsAroundSubscribe(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.run(t)
	}
	p := newPublisher(t, nodes[0])
	// Each round's channel is new to both nodes, so each subscribe races
	// its node's own subscription to the channel in Redis as well.
	for round := range 15 {
		raceSubscribe(t, nodes, p, "cache-race-"+strconv.Itoa(round))
	}
}

func raceSubscribe(t *testing.T, nodes []*testNode, p *publisher, ch string) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	p.publish(t, appID, ch, "n", "1") // cached before anyone subscribes
	var published atomic.Int64
	published.Store(1)
	var pubErr error
	go func() {
		defer close(done)
		for i := 2; ; i++ {
			select {
			case <-stop:
				pubErr = p.try(appID, ch, "end", "0")
				return
			default:
				if pubErr = p.try(appID, ch, "n", strconv.Itoa(i)); pubErr != nil {
					return
				}
				published.Store(int64(i))
			}
		}
	}()
	conns := make([]*websocket.Conn, 4)
	for i := range conns {
		conns[i], _ = nodes[i%2].connect(t)
		send(t, conns[i], `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)
	}
	// Every subscription succeeded before the end is published.
	got := make([][]string, len(conns))
	for i, c := range conns {
		for {
			f := read(t, c)
			if f.Event == "pusher_internal:subscription_succeeded" {
				break
			}
			got[i] = append(got[i], f.Event+" "+*f.Data) // a live event can pass the reply
		}
	}
	close(stop)
	<-done
	require.NoError(t, pubErr)
	last := int(published.Load())
	for i, c := range conns {
		for {
			f := read(t, c)
			require.NotEqual(t, "pusher:cache_miss", f.Event, "subscriber %d: the channel had events", i)
			got[i] = append(got[i], f.Event+" "+*f.Data)
			if f.Event == "end" {
				break
			}
		}
		var ns []int
		for _, e := range got[i][:len(got[i])-1] {
			var n int
			_, err := fmt.Sscanf(e, "n %d", &n)
			require.NoError(t, err, "subscriber %d: %v", i, got[i])
			ns = append(ns, n)
		}
		if len(ns) == 0 {
			continue // its cache read came after the end: the end was its cached event
		}
		for k := 1; k < len(ns); k++ {
			// Only the first event, the cached one, may come again live.
			require.True(t, ns[k] == ns[k-1]+1 || (k == 1 && ns[1] == ns[0]), "%s subscriber %d: %d after %d in %v", ch, i, ns[k], ns[k-1], got[i])
		}
		require.Equal(t, last, ns[len(ns)-1], "%s subscriber %d: %v", ch, i, got[i])
	}
}
