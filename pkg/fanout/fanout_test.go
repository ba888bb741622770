package fanout

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
)

// TestRouting: two nodes joined to different and overlapping channels of
// several apps each receive exactly their channels' messages, once.
func TestRouting(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		a := newNode(t, be.Client(t), nil).start(t)
		b := newNode(t, be.Client(t), nil).start(t)
		pub := New(be.Client(t), Options{}) // publish-only, like httpapi
		apps := []string{"app-1", "app-2", "app-3"}
		channels := []string{"ch-a", "ch-b", "private-ch-c"}

		// Joins repeated on purpose: interest is ref-counted and must not
		// subscribe twice.
		for range 3 {
			a.Join("app-1", "ch-a")
		}
		a.Join("app-1", "ch-b")
		a.Join("app-2", "ch-a")
		b.Join("app-1", "ch-b")
		b.Join("app-3", "ch-a")
		b.Join("app-2", "private-ch-c")
		b.Join("app-2", "private-ch-c")
		for _, app := range apps {
			a.Join(app, "fence")
			b.Join(app, "fence")
		}
		wantA := map[string]bool{"app-1/ch-a": true, "app-1/ch-b": true, "app-2/ch-a": true}
		wantB := map[string]bool{"app-1/ch-b": true, "app-3/ch-a": true, "app-2/private-ch-c": true}
		rdb := be.Client(t)
		for _, app := range apps {
			for _, ch := range channels {
				var n int64
				if wantA[app+"/"+ch] {
					n++
				}
				if wantB[app+"/"+ch] {
					n++
				}
				waitSubs(t, rdb, app, ch, n)
			}
			waitSubs(t, rdb, app, "fence", 2)
		}

		ctx := context.Background()
		for _, app := range apps {
			for _, ch := range channels {
				require.NoError(t, pub.Publish(ctx, app, Message{
					Channel: ch, Event: "ev", Data: `{"to":"` + app + "/" + ch + `"}`,
					UserID: "u-1", ExceptSocket: "1.2", ExceptUser: "u-2",
				}))
			}
		}
		// A fence after everything: per app, messages reach a node in
		// publish order, so once a node has every app's fence it has all
		// it will get.
		for _, app := range apps {
			require.NoError(t, pub.Publish(ctx, app, Message{Channel: "fence", Event: "fence"}))
		}
		for _, n := range []*node{a, b} {
			for _, app := range apps {
				n.waitFor(t, app, "fence", 1)
			}
		}

		check := func(name string, n *node, want map[string]bool) {
			t.Helper()
			got := map[string]int{}
			for _, d := range n.all() {
				if d.m.Channel == "fence" {
					continue
				}
				key := d.app + "/" + d.m.Channel
				got[key]++
				require.Equal(t, Message{
					Channel: d.m.Channel, Event: "ev", Data: `{"to":"` + key + `"}`,
					UserID: "u-1", ExceptSocket: "1.2", ExceptUser: "u-2",
				}, d.m, "%s: message fields", name)
			}
			wantCounts := map[string]int{}
			for k := range want {
				wantCounts[k] = 1
			}
			require.Equal(t, wantCounts, got, "%s: deliveries per app/channel", name)
		}
		check("a", a, wantA)
		check("b", b, wantB)
		require.Equal(t, float64(len(wantA)+len(apps)), testutil.ToFloat64(a.m.subscribed))
		require.Equal(t, float64(len(apps)*len(channels)+len(apps)), testutil.ToFloat64(pub.m.published))
	})
}

// TestOrder: 1,000 numbered messages on one channel reach both nodes in
// publish order, each exactly once, though one node joined five times.
func TestOrder(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		const n = 1000
		a := newNode(t, be.Client(t), nil).start(t)
		b := newNode(t, be.Client(t), nil).start(t)
		for range 5 {
			a.Join("app-1", "presence-room")
		}
		b.Join("app-1", "presence-room")
		rdb := be.Client(t)
		waitSubs(t, rdb, "app-1", "presence-room", 2)

		ctx := context.Background()
		for i := range n {
			require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "presence-room", Event: "n", Data: strconv.Itoa(i)}))
		}
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "presence-room", Event: "end"}))
		for name, nd := range map[string]*node{"a": a, "b": b} {
			got := nd.waitFor(t, "app-1", "presence-room", n+1)
			require.Len(t, got, n+1, "%s: duplicates", name)
			for i, m := range got[:n] {
				require.Equal(t, strconv.Itoa(i), m.Data, "%s: message %d out of order", name, i)
			}
			require.Equal(t, "end", got[n].Event)
			require.Equal(t, float64(n+1), testutil.ToFloat64(nd.m.received), name)
		}
		require.Equal(t, float64(n+1), testutil.ToFloat64(a.m.published))
		require.Equal(t, float64(n+1), metricstest.Value(t, a.reg, "headcount_fanout_publish_duration_seconds_count"))
	})
}

// TestLeave: delivery stops with the last Leave, Redis is unsubscribed,
// and a later Join subscribes again.
func TestLeave(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		a := newNode(t, be.Client(t), nil).start(t)
		rdb := be.Client(t)
		ctx := context.Background()
		a.Join("app-1", "ch")
		a.Join("app-1", "ch")
		a.Join("app-1", "fence")
		waitSubs(t, rdb, "app-1", "ch", 1)
		waitSubs(t, rdb, "app-1", "fence", 1)

		a.Leave("app-1", "ch") // one of two: still subscribed
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "ch", Event: "one-left"}))
		a.waitFor(t, "app-1", "ch", 1)

		a.Leave("app-1", "ch")
		a.Leave("app-1", "ch") // unmatched: ignored
		// Delivery stops at once, whether or not the unsubscribe has
		// reached Redis yet.
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "ch", Event: "after-leave"}))
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "fence", Event: "fence"}))
		a.waitFor(t, "app-1", "fence", 1)
		require.Len(t, a.received("app-1", "ch"), 1)
		waitSubs(t, rdb, "app-1", "ch", 0)
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "ch", Event: "after-unsubscribe"}))

		// Leaving the app's last channel closes its connection on a
		// cluster; joining again opens a new one.
		a.Leave("app-1", "fence")
		waitSubs(t, rdb, "app-1", "fence", 0)
		a.Join("app-1", "ch")
		waitSubs(t, rdb, "app-1", "ch", 1)
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "ch", Event: "rejoined"}))
		got := a.waitFor(t, "app-1", "ch", 2)
		require.Equal(t, []string{"one-left", "rejoined"}, []string{got[0].Event, got[1].Event})
		require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.subscribed) == 1 }, wait, tick)
	})
}

// TestChurn: concurrent Joins and Leaves net out; Redis ends subscribed to
// exactly the channels with interest left, once each. Joins and Leaves
// before Run net out too.
func TestChurn(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		rdb := be.Client(t)
		a := newNode(t, be.Client(t), nil)
		a.Join("app-0", "before")
		a.Leave("app-0", "before")
		a.Join("app-0", "kept")
		a.start(t)

		const workers, ops, channels = 8, 400, 12
		key := func(c int) (string, string) { return fmt.Sprintf("app-%d", c%3), fmt.Sprintf("ch-%d", c) }
		var mu sync.Mutex
		total := make([]int, channels)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				mine := make([]int, channels)
				for range ops {
					c := rng.IntN(channels)
					app, ch := key(c)
					if mine[c] > 0 && rng.IntN(2) == 0 {
						a.Leave(app, ch)
						mine[c]--
					} else {
						a.Join(app, ch)
						mine[c]++
					}
				}
				// Drop all interest in the odd channels, keep the rest.
				for c := 1; c < channels; c += 2 {
					app, ch := key(c)
					for ; mine[c] > 0; mine[c]-- {
						a.Leave(app, ch)
					}
				}
				mu.Lock()
				for c := range mine {
					total[c] += mine[c]
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		wantTopics := 1 // app-0/kept
		for c := range channels {
			app, ch := key(c)
			var want int64
			if total[c] > 0 {
				want = 1
				wantTopics++
			}
			waitSubs(t, rdb, app, ch, want)
		}
		waitSubs(t, rdb, "app-0", "before", 0)
		waitSubs(t, rdb, "app-0", "kept", 1)
		require.Eventually(t, func() bool {
			return testutil.ToFloat64(a.m.subscribed) == float64(wantTopics)
		}, wait, tick, "subscribed_topics %v, want %d", testutil.ToFloat64(a.m.subscribed), wantTopics)
	})
}

// TestRestart: a Redis restart loses the subscriptions; the bus reports
// the outage once, goes unhealthy, restores them (including a Join made
// during the outage) and delivers again.
func TestRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	lines := newLineCounter("subscriptions lost", "subscriptions restored")
	a := newNode(t, srv.Client(t), countingLogger(t, lines)).start(t)
	pub := New(srv.Client(t), Options{})
	a.Join("app-1", "ch")
	a.waitHealthy(t)
	waitSubs(t, srv.Client(t), "app-1", "ch", 1)
	publish(t, pub, "app-1", Message{Channel: "ch", Event: "before"})
	a.waitFor(t, "app-1", "ch", 1)

	srv.Kill()
	require.Eventually(t, func() bool { return !a.Healthy() }, wait, tick, "healthy with Redis down")
	a.Join("app-2", "during") // its subscribe fails until Redis is back
	require.Error(t, pub.Publish(context.Background(), "app-1", Message{Channel: "ch", Event: "lost"}))
	srv.Restart(t)
	a.waitHealthy(t)

	waitSubs(t, srv.Client(t), "app-1", "ch", 1)
	waitSubs(t, srv.Client(t), "app-2", "during", 1)
	publish(t, pub, "app-1", Message{Channel: "ch", Event: "after"})
	publish(t, pub, "app-2", Message{Channel: "during", Event: "joined-during"})
	got := a.waitFor(t, "app-1", "ch", 2)
	require.Equal(t, []string{"before", "after"}, []string{got[0].Event, got[1].Event})
	a.waitFor(t, "app-2", "during", 1)
	require.Equal(t, 1, lines.count("subscriptions lost"), "outage logged once")
	require.Equal(t, 1, lines.count("subscriptions restored"))
	require.Equal(t, float64(1), testutil.ToFloat64(a.m.outages))
}

// TestStopDuringOutage: a bus stopped while Redis is down does not claim
// on its way out that the subscriptions were restored.
func TestStopDuringOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	lines := newLineCounter("subscriptions lost", "subscriptions restored")
	a := newNode(t, srv.Client(t), countingLogger(t, lines)).start(t)
	a.Join("app-1", "ch")
	a.waitHealthy(t)
	srv.Kill()
	require.Eventually(t, func() bool { return lines.count("subscriptions lost") == 1 }, wait, tick)
	a.stop(t)
	require.Zero(t, lines.count("subscriptions restored"), "nothing was restored")
}

// TestSilentConnection: a connection that stops answering (Redis paused,
// as a half-open TCP connection would look: writes succeed, nothing comes
// back) is declared dead after 3 pings' worth of silence and redialled,
// and its subscriptions work again once Redis answers.
func TestSilentConnection(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	a := newNode(t, srv.Client(t), nil)
	a.pingEvery = 50 * time.Millisecond
	a.start(t)
	a.Join("app-1", "ch")
	waitSubs(t, rdb, "app-1", "ch", 1)
	a.waitHealthy(t)

	require.NoError(t, rdb.Do(ctx, "client", "pause", 2000, "all").Err())
	require.Eventually(t, func() bool { return !a.Healthy() }, wait, tick, "a silent connection passed for healthy")
	a.waitHealthy(t)
	waitSubs(t, rdb, "app-1", "ch", 1)
	publish(t, a.Bus, "app-1", Message{Channel: "ch", Event: "after-pause"})
	a.waitFor(t, "app-1", "ch", 1)
}

// TestClusterRestart: restarting the master that holds an app's slot loses
// the subscriptions of its apps until it is back, then they resume; the
// outage is logged once, though it spans several apps' connections.
func TestClusterRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster in -short")
	}
	c := redistest.NewCluster(t)
	cc := c.Client(t)
	lines := newLineCounter("subscriptions lost", "subscriptions restored")
	a := newNode(t, c.Client(t), countingLogger(t, lines)).start(t)
	pub := New(c.Client(t), Options{})
	const apps = 6
	for i := range apps {
		a.Join(fmt.Sprintf("app-%d", i), "ch")
	}
	for i := range apps {
		waitSubs(t, cc, fmt.Sprintf("app-%d", i), "ch", 1)
	}
	a.waitHealthy(t)

	master, err := cc.MasterForKey(context.Background(), keys{}.topic("app-0", "ch"))
	require.NoError(t, err)
	var srv *redistest.Server
	for _, n := range c.Nodes {
		if n.Addr == master.Options().Addr {
			srv = n
		}
	}
	require.NotNil(t, srv)
	srv.Kill()
	require.Eventually(t, func() bool { return !a.Healthy() }, wait, tick, "healthy with a master down")
	// Same node id and slots: nodes.conf sits in the server's directory.
	srv.Restart(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
	a.waitHealthy(t)
	for i := range apps {
		app := fmt.Sprintf("app-%d", i)
		waitSubs(t, cc, app, "ch", 1)
		publish(t, pub, app, Message{Channel: "ch", Event: "after"})
		a.waitFor(t, app, "ch", 1)
	}
	require.Equal(t, 1, lines.count("subscriptions lost"), "outage logged once")
	require.Equal(t, 1, lines.count("subscriptions restored"))
}

// TestSlotMigration: when the slot of an app moves to another master,
// Redis unsubscribes its shard channels; the bus resubscribes on the new
// master.
func TestSlotMigration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster in -short")
	}
	c := redistest.NewCluster(t)
	cc := c.Client(t)
	ctx := context.Background()
	a := newNode(t, c.Client(t), nil).start(t)
	pub := New(c.Client(t), Options{})
	a.Join("app-1", "ch")
	waitSubs(t, cc, "app-1", "ch", 1)
	// The publisher learns the slot map now, so its next publish meets
	// MOVED: a redirect is followed though publishes are never retried.
	publish(t, pub, "app-1", Message{Channel: "ch", Event: "before"})
	a.waitFor(t, "app-1", "ch", 1)

	topic := keys{}.topic("app-1", "ch")
	slot, err := cc.ClusterKeySlot(ctx, topic).Result()
	require.NoError(t, err)
	from, err := cc.MasterForKey(ctx, topic)
	require.NoError(t, err)
	ids := map[string]string{} // addr -> node id
	clients := map[string]*redis.Client{}
	for _, n := range c.Nodes {
		cl := n.Client(t)
		id, err := cl.Do(ctx, "cluster", "myid").Text()
		require.NoError(t, err)
		ids[n.Addr], clients[n.Addr] = id, cl
	}
	var to string
	for addr := range ids {
		if addr != from.Options().Addr {
			to = addr
			break
		}
	}
	src, dst := clients[from.Options().Addr], clients[to]
	require.NoError(t, dst.Do(ctx, "cluster", "setslot", slot, "importing", ids[from.Options().Addr]).Err())
	require.NoError(t, src.Do(ctx, "cluster", "setslot", slot, "migrating", ids[to]).Err())
	for _, cl := range clients {
		require.NoError(t, cl.Do(ctx, "cluster", "setslot", slot, "node", ids[to]).Err())
	}

	require.Eventually(t, func() bool {
		n, err := dst.PubSubShardNumSub(ctx, topic).Result()
		return err == nil && n[topic] == 1
	}, wait, tick, "not resubscribed on the slot's new master")
	a.waitHealthy(t)
	require.NoError(t, pub.Publish(ctx, "app-1", Message{Channel: "ch", Event: "moved"}))
	got := a.waitFor(t, "app-1", "ch", 2)
	require.Equal(t, []string{"before", "moved"}, []string{got[0].Event, got[1].Event})
}

// TestDecodeError: a message that does not decode is counted and logged,
// and delivery goes on.
func TestDecodeError(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		lines := newLineCounter("does not decode")
		a := newNode(t, be.Client(t), countingLogger(t, lines)).start(t)
		rdb := be.Client(t)
		a.Join("app-1", "ch")
		waitSubs(t, rdb, "app-1", "ch", 1)
		ctx := context.Background()
		topic := keys{}.topic("app-1", "ch")
		for _, junk := range []string{"", "{\"event\":\"x\"}", "\x01\xff"} {
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				require.NoError(t, cc.SPublish(ctx, topic, junk).Err())
			} else {
				require.NoError(t, rdb.Publish(ctx, topic, junk).Err())
			}
		}
		require.NoError(t, a.Publish(ctx, "app-1", Message{Channel: "ch", Event: "good"}))
		got := a.waitFor(t, "app-1", "ch", 1)
		require.Equal(t, "good", got[0].Event)
		require.Equal(t, float64(3), testutil.ToFloat64(a.m.decodeErrors))
		require.Equal(t, 1, lines.count("does not decode"), "rate-limited log")
	})
}

// TestRunStops: Run returns nil when its context ends, with no goroutine
// left behind, and Healthy follows Run.
func TestRunStops(t *testing.T) {
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		rdb := be.Client(t)
		// Warm the client up, so its own lazily started goroutines are in
		// the baseline.
		require.NoError(t, rdb.Ping(context.Background()).Err())
		base := runtime.NumGoroutine()

		a := newNode(t, rdb, nil)
		require.False(t, a.Healthy(), "healthy before Run")
		for i := range 5 {
			a.Join(fmt.Sprintf("app-%d", i), "ch")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx, a.deliver) }()
		a.waitHealthy(t)
		for i := range 5 {
			waitSubs(t, rdb, fmt.Sprintf("app-%d", i), "ch", 1)
		}
		require.Error(t, a.Run(ctx, a.deliver), "a second Run at once")
		require.NoError(t, a.Publish(context.Background(), "app-3", Message{Channel: "ch", Event: "e"}))
		a.waitFor(t, "app-3", "ch", 1)

		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(wait):
			t.Fatal("Run did not return")
		}
		require.False(t, a.Healthy(), "healthy after Run")
		for i := range 5 {
			waitSubs(t, rdb, fmt.Sprintf("app-%d", i), "ch", 0)
		}
		waitGoroutines(t, base)

		// Run again resubscribes what is still joined.
		a.start(t)
		waitSubs(t, rdb, "app-0", "ch", 1)
	})
}

func TestPublishInvalid(t *testing.T) {
	t.Parallel()
	b := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Options{})
	for _, tc := range []struct {
		name, app string
		m         Message
	}{
		{"no app", "", Message{Channel: "c", Event: "e"}},
		{"no channel", "a", Message{Event: "e"}},
		{"no event", "a", Message{Channel: "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, b.Publish(context.Background(), tc.app, tc.m), errInvalid)
		})
	}
}

func TestTopicSlot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster in -short")
	}
	cc := redistest.NewCluster(t).Client(t)
	ctx := context.Background()
	want, err := cc.ClusterKeySlot(ctx, "{app-1}").Result()
	require.NoError(t, err)
	for _, ch := range []string{"a", "presence-b", "private-encrypted-c", "#server-to-user-1", "x}y{z"} {
		got, err := cc.ClusterKeySlot(ctx, keys{}.topic("app-1", ch)).Result()
		require.NoError(t, err)
		require.Equal(t, want, got, ch)
	}
}

// waitGoroutines waits until no more than base goroutines run. It polls on
// the test's goroutine: require.Eventually runs its condition on one more.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, baseline %d:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(tick)
	}
}

// TestPublishAfterWaitJoinedArrives: an event published as soon as
// WaitJoined returns after a Join reaches the joining node, on every one of
// many fresh channels (a subscriber's own subscription_count). Without the
// wait the publish overtakes the subscribe and most are lost.
func TestPublishAfterWaitJoinedArrives(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		n := newNode(t, be.Client(t), nil).start(t)
		n.waitHealthy(t)
		pub := New(be.Client(t), Options{})
		const channels = 100
		for i := range channels {
			ch := "fresh-" + strconv.Itoa(i)
			n.Join("app-1", ch)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			require.NoError(t, n.WaitJoined(ctx, "app-1", []string{ch}))
			cancel()
			publish(t, pub, "app-1", Message{Channel: ch, Event: "count", Data: strconv.Itoa(i)})
		}
		for i := range channels {
			n.waitFor(t, "app-1", "fresh-"+strconv.Itoa(i), 1)
		}
	})
}

// TestWaitJoinedAfterLeavingAndJoiningAgain: a channel left by its last
// subscriber and joined again, as one socket's unsubscribe and another's
// subscribe do, is confirmed again whether or not the runner unsubscribed
// it in between, and an event published then arrives. When it had not, no
// second SUBSCRIBE went out and WaitJoined waited for a confirmation
// that never came.
func TestWaitJoinedAfterLeavingAndJoiningAgain(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		n := newNode(t, be.Client(t), nil).start(t)
		n.waitHealthy(t)
		pub := New(be.Client(t), Options{})
		const rounds = 200
		n.Join("app-1", "churn")
		for i := range rounds {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			require.NoError(t, n.WaitJoined(ctx, "app-1", []string{"churn"}), "round %d", i)
			cancel()
			publish(t, pub, "app-1", Message{Channel: "churn", Event: "e", Data: strconv.Itoa(i)})
			n.waitFor(t, "app-1", "churn", i+1)
			n.Leave("app-1", "churn")
			if i%2 == 1 {
				runtime.Gosched() // sometimes the runner unsubscribes in between
			}
			n.Join("app-1", "churn")
		}
	})
}

// orderHook records the names of the commands of every pipeline sent.
type orderHook struct {
	mu    sync.Mutex
	names [][]string
}

func (h *orderHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *orderHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *orderHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			names = append(names, c.Name()+" "+fmt.Sprint(c.Args()[1]))
		}
		h.mu.Lock()
		h.names = append(h.names, names)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// TestPublishBatchQueuesAlsoFirst: what a caller queues for a message goes
// to Redis before the message's publish, so a write it depends on (a cache
// channel's last event) is there before any node can receive the message.
func TestPublishBatchQueuesAlsoFirst(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	h := &orderHook{}
	rdb.AddHook(h)
	b := New(rdb, Options{})
	msgs := []Message{{Channel: "a", Event: "e"}, {Channel: "b", Event: "e"}}
	require.NoError(t, b.PublishBatch(context.Background(), "app", msgs, func(p redis.Pipeliner, i int) {
		p.Set(context.Background(), "k-"+msgs[i].Channel, "v", 0)
	}))
	h.mu.Lock()
	defer h.mu.Unlock()
	var sent [][]string // the connection's handshake is a pipeline too
	for _, names := range h.names {
		if names[0] != "client setinfo" {
			sent = append(sent, names)
		}
	}
	require.Equal(t, [][]string{{"set k-a", "publish " + b.topic("app", "a"), "set k-b", "publish " + b.topic("app", "b")}}, sent)
}

// TestSync: once Sync returns, every message published before it was
// called has been delivered, on a single Redis and on a Cluster (where the
// PING goes to the app's own connection); without a connection for the
// app (before the bus runs), Sync fails at once.
func TestSync(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		ctx := context.Background()
		// Before the bus runs there is no connection for any app. (Once it
		// runs, a single Redis's one connection may open before any join.)
		a := newNode(t, be.Client(t), nil)
		require.ErrorIs(t, a.Sync(ctx, "app-1"), errNoConnection)
		a.start(t)
		a.Join("app-1", "room")
		require.NoError(t, a.WaitJoined(ctx, "app-1", []string{"room"}))
		pub := New(be.Client(t), Options{})
		for round := range 20 {
			const n = 50
			msgs := make([]Message, n)
			for i := range msgs {
				msgs[i] = Message{Channel: "room", Event: "n", Data: strconv.Itoa(round*n + i)}
			}
			require.NoError(t, pub.PublishBatch(ctx, "app-1", msgs, nil))
			require.NoError(t, a.Sync(ctx, "app-1"))
			got := a.received("app-1", "room")
			require.Len(t, got, (round+1)*n, "round %d: Sync returned before the messages published ahead of it were delivered", round)
		}
		a.smu.Lock()
		defer a.smu.Unlock()
		require.Empty(t, a.syncs, "a finished Sync leaves nothing behind")
	})
}
