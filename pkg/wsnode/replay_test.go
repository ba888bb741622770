package wsnode_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/resume"
)

// History rules of the test app (testApps): kept- channels rewind 5 of
// their last 50 events; kept-small- channels keep 3 and rewind none.
var (
	keptRule      = apps.History{Prefix: "kept-", Events: 50, Seconds: 600, Rewind: 5}
	keptSmallRule = apps.History{Prefix: "kept-small-", Events: 3, Seconds: 600}
)

// publishN publishes events "n" with data from, from+1, ... to+1 on ch,
// one after the other, as the HTTP API would.
func publishN(t *testing.T, n *testNode, ch string, rule apps.History, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		require.NoError(t, n.Publish(context.Background(), appID, fanout.Message{Channel: ch, Event: "n", Data: strconv.Itoa(i), Keep: rule}))
	}
}

// readNumbers reads c's events on ch until one with data last, and
// returns their numbers in the order they came, answering the node's
// pings as pusher-js does; other frames fail.
func readNumbers(t *testing.T, c *websocket.Conn, ch string, last int) []int {
	t.Helper()
	var got []int
	for len(got) == 0 || got[len(got)-1] != last {
		f := readAnswering(t, c)
		require.Equal(t, ch, f.Channel, f.raw)
		require.Equal(t, "n", f.Event, f.raw)
		v, err := strconv.Atoi(*f.Data)
		require.NoError(t, err, f.raw)
		got = append(got, v)
	}
	return got
}

// readAnswering reads c's next frame, answering (and skipping) the
// node's pusher:ping as pusher-js does.
func readAnswering(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	for {
		f := read(t, c)
		if f.Event != "pusher:ping" {
			return f
		}
		send(t, c, `{"event":"pusher:pong","data":{}}`)
	}
}

// ackPing waits for the node's next pusher:ping and answers it: the page
// acknowledges everything before it. A ping of its own then makes sure
// the node handled the pong (a message in the same read as a close may
// not be).
func ackPing(t *testing.T, c *websocket.Conn) {
	t.Helper()
	f := read(t, c)
	require.Equal(t, "pusher:ping", f.Event, f.raw)
	send(t, c, `{"event":"pusher:pong","data":{}}`)
	quiet(t, c)
}

// subscribeAnswering subscribes c to ch as subscribe does, answering the
// node's pings meanwhile.
func subscribeAnswering(t *testing.T, c *websocket.Conn, ch string) {
	t.Helper()
	send(t, c, `{"event":"pusher:subscribe","data":{"auth":"","channel":"`+ch+`"}}`)
	f := readAnswering(t, c)
	require.Equal(t, "pusher_internal:subscription_succeeded", f.Event, f.raw)
	require.Equal(t, ch, f.Channel)
}

// quiet requires that nothing but the node's pings is owed to c: a ping
// of its own is answered next.
func quiet(t *testing.T, c *websocket.Conn) {
	t.Helper()
	send(t, c, `{"event":"pusher:ping","data":{}}`)
	f := readAnswering(t, c)
	require.Equal(t, `{"event":"pusher:pong","data":"{}"}`, f.raw)
}

// dialResume connects to n as a page with resume id would
// (wsPath "/r/"+id).
func (n *testNode) dialResume(t *testing.T, id string) (*websocket.Conn, string) {
	t.Helper()
	c := dial(t, "ws://"+n.Addr()+"/r/"+id+"/app/"+appKey+pusherJSQuery)
	f := read(t, c)
	require.Equal(t, "pusher:connection_established", f.Event)
	return c, f.data(t)["socket_id"].(string)
}

// requireConsecutive: got is from, from+1, ..., last without a gap, a
// repeat or a swap.
func requireConsecutive(t *testing.T, got []int, from, last int) {
	t.Helper()
	want := make([]int, 0, last-from+1)
	for i := from; i <= last; i++ {
		want = append(want, i)
	}
	require.Equal(t, want, got)
}

// TestRewindRacingLive is a property test of rewind on subscribe: while
// events are published at random moments around a subscribe, the
// subscriber gets the channel's last 5 events before it subscribed and
// every one after, each once and in order, whatever the timing. On the
// old code the subscriber got no history: the run was shorter than 5
// whenever fewer than 5 events followed its subscribe (the rounds with
// none time out).
func TestRewindRacingLive(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, n *testNode) {
		rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano()))) //nolint:gosec // test timing, not security
		for round := range 6 {
			ch := fmt.Sprintf("kept-race-%d", round)
			before, racing := 5+rng.IntN(5), rng.IntN(12)
			if round == 0 {
				racing = 0
			}
			publishN(t, n, ch, keptRule, 0, before)
			c, _ := n.connect(t)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := before; i < before+racing; i++ {
					if d := rng.IntN(3); d > 0 {
						time.Sleep(time.Duration(d) * time.Millisecond) // the random timing under test, not a wait
					}
					_ = n.Publish(context.Background(), appID, fanout.Message{Channel: ch, Event: "n", Data: strconv.Itoa(i), Keep: keptRule})
				}
			}()
			subscribeAnswering(t, c, ch)
			<-done
			last := before + racing - 1
			got := readNumbers(t, c, ch, last)
			require.GreaterOrEqual(t, len(got), keptRule.Rewind, "round %d: %v", round, got)
			requireConsecutive(t, got, got[0], last)
			require.GreaterOrEqual(t, got[0], 0)
			pingPong(t, c) // and nothing more
		}
	})
}

// each runs f on a node of a single Redis and on one of a 3-master
// Cluster.
func each(t *testing.T, f func(t *testing.T, n *testNode)) {
	t.Run("single", func(t *testing.T) { f(t, startNode(t).run(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, startNodesOnCluster(t, 1)[0].run(t)) })
}

// TestReplayHoldBound: live events that arrive during a replay are held
// and follow the history; past the hold's bound the replay gives up (a
// metric) and the live events go on, in order, with no history after
// them. On the old code neither channel got any history.
func TestReplayHoldBound(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	n.SetHoldLimit(2)
	// live: how many live events to publish during a replay of the channel.
	live := map[string]*atomic.Int32{"kept-hold-under": {}, "kept-hold-over": {}, "kept-hold-resume": {}}
	live["kept-hold-under"].Store(1)
	live["kept-hold-over"].Store(3)
	var abandoned atomic.Int32
	n.OnReplayRead(func(ch string) { // on the socket's handler: assert, not require
		k := int(live[ch].Load())
		for i := 10; i < 10+k; i++ {
			assert.NoError(t, n.Publish(context.Background(), appID, fanout.Message{Channel: ch, Event: "n", Data: strconv.Itoa(i), Keep: keptRule}))
		}
		if k > 2 {
			want := float64(abandoned.Add(1))
			assert.Eventually(t, func() bool {
				return metricstest.Value(t, n.reg, "headcount_wsnode_replays_abandoned_total") == want
			}, wait, tick)
		}
	})
	n.run(t)
	for _, ch := range []string{"kept-hold-under", "kept-hold-over"} {
		publishN(t, n, ch, keptRule, 0, 10)
	}
	c, _ := n.connect(t)
	subscribe(t, c, "kept-hold-under")
	requireConsecutive(t, readNumbers(t, c, "kept-hold-under", 10), 5, 10)
	subscribe(t, c, "kept-hold-over")
	requireConsecutive(t, readNumbers(t, c, "kept-hold-over", 12), 10, 12)
	pingPong(t, c)
	require.Equal(t, 5.0, metricstest.Value(t, n.reg, "headcount_wsnode_replayed_events_total"))

	// A resume given up is said: resume_failed from the page's serial to
	// the first live event it got.
	const id, ch = "page-hold-resume", "kept-hold-resume"
	saved := leaveAcknowledged(t, n, id, ch, keptRule, 2)
	publishN(t, n, ch, keptRule, 2, 10)
	live[ch].Store(3)
	p, _ := n.dialResume(t, id)
	subscribeAnswering(t, p, ch)
	requireConsecutive(t, readNumbers(t, p, ch, 12), 10, 12)
	f := readAnswering(t, p)
	require.Equal(t, "headcount:resume_failed", f.Event, f.raw)
	require.Equal(t, saved, f.data(t)["lost_from"])
	require.NotEmpty(t, f.data(t)["lost_to"])
	quiet(t, p)
}

// leaveAcknowledged is a page of id that got ch's events 0 to k-1,
// acknowledged them and closed; it returns the serial saved for it.
func leaveAcknowledged(t *testing.T, n *testNode, id, ch string, rule apps.History, k int) string {
	t.Helper()
	c, _ := n.dialResume(t, id)
	subscribeAnswering(t, c, ch)
	publishN(t, n, ch, rule, 0, k)
	requireConsecutive(t, readNumbers(t, c, ch, k-1), 0, k-1)
	ackPing(t, c)
	require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
	return waitSaved(t, n.rdb(t), id, ch)
}

// waitSaved waits until (app, id)'s saved serial of ch is the serial of
// ch's last event, and returns it.
func waitSaved(t *testing.T, rdb redis.UniversalClient, id, ch string) string {
	t.Helper()
	last, err := history.New(rdb, history.Options{}).Last(context.Background(), appID, ch, 1)
	require.NoError(t, err)
	require.Len(t, last, 1)
	require.Eventually(t, func() bool {
		got, err := resume.New(rdb, keyspace.Space{}).Load(context.Background(), appID, id)
		return err == nil && got[ch] == last[0].Serial
	}, wait, tick)
	return last[0].Serial
}

// TestResumeAfterClose: a page that reconnects with its id gets, after
// its subscription_succeeded, exactly what was published while it was
// away, then live events: no gap and, with all it got acknowledged (a
// pong to the node's ping), no duplicate (nor the rewind's last 5). On
// the old code it got no history.
func TestResumeAfterClose(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, n *testNode) {
		const id, ch = "page-resume-close", "kept-close"
		leaveAcknowledged(t, n, id, ch, keptRule, 3)
		publishN(t, n, ch, keptRule, 3, 7)

		c, _ := n.dialResume(t, id)
		subscribeAnswering(t, c, ch)
		requireConsecutive(t, readNumbers(t, c, ch, 6), 3, 6)
		publishN(t, n, ch, keptRule, 7, 8)
		requireConsecutive(t, readNumbers(t, c, ch, 7), 7, 7)
		quiet(t, c)
		require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_resumes_total"))
	})
}

// TestResumeAfterNodeLost: a page whose node went away without a word
// (its state is the last checkpoint) resumes on another node with no gap;
// what it may get twice is what its node wrote after that checkpoint.
func TestResumeAfterNodeLost(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)
	const id, ch = "page-node-lost", "kept-lost"
	c, _ := a.dialResume(t, id)
	subscribeAnswering(t, c, ch)
	publishN(t, a, ch, keptRule, 0, 3)
	requireConsecutive(t, readNumbers(t, c, ch, 2), 0, 2)
	ackPing(t, c)
	waitSaved(t, a.rdb(t), id, ch) // a checkpoint
	// The node "dies": its state stays at the checkpoint while more is
	// written, and its close is never saved.
	a.FreezeResumeState()
	publishN(t, a, ch, keptRule, 3, 5)
	requireConsecutive(t, readNumbers(t, c, ch, 4), 3, 4)
	_ = c.CloseNow()
	publishN(t, b, ch, keptRule, 5, 8)

	c, _ = b.dialResume(t, id)
	subscribeAnswering(t, c, ch)
	requireConsecutive(t, readNumbers(t, c, ch, 7), 3, 7) // 3 and 4 twice: after the checkpoint
	quiet(t, c)
}

// TestResumeFailedWhenTrimmed: when the history no longer reaches back
// to the page's serial, it is told (headcount:resume_failed, from its
// serial to the first event it gets next), then gets what remains. On the
// old code the gap was silent.
func TestResumeFailedWhenTrimmed(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	const id, ch = "page-trimmed", "kept-small-trim"
	saved := leaveAcknowledged(t, n, id, ch, keptSmallRule, 1)
	publishN(t, n, ch, keptSmallRule, 1, 6) // the history keeps 3, 4, 5

	c, _ := n.dialResume(t, id)
	subscribeAnswering(t, c, ch)
	f := readAnswering(t, c)
	require.Equal(t, "headcount:resume_failed", f.Event, f.raw)
	require.Equal(t, ch, f.Channel)
	d := f.data(t)
	require.Equal(t, saved, d["lost_from"])
	require.NotEmpty(t, d["lost_to"])
	requireConsecutive(t, readNumbers(t, c, ch, 5), 3, 5)
	quiet(t, c)
	require.Equal(t, 1.0, metricstest.Value(t, n.reg, "headcount_wsnode_resume_failed_total"))
}

// TestReplayCostsNothingElse: a socket without an id on a history
// channel without rewind, and a socket with an id on a channel without
// history, make no Redis read or write of resume state.
func TestReplayCostsNothingElse(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	rdb := n.rdb(t)
	require.NoError(t, rdb.ConfigResetStat(context.Background()).Err())
	plain, _ := n.connect(t)
	subscribe(t, plain, "kept-small-plain")
	withID, _ := n.dialResume(t, "page-no-history")
	subscribe(t, withID, "no-history")
	publishN(t, n, "kept-small-plain", keptSmallRule, 0, 2)
	requireConsecutive(t, readNumbers(t, plain, "kept-small-plain", 1), 0, 1)
	publishN(t, n, "no-history", apps.History{}, 0, 2)
	requireConsecutive(t, readNumbers(t, withID, "no-history", 1), 0, 1)
	require.NoError(t, plain.Close(websocket.StatusNormalClosure, ""))
	require.NoError(t, withID.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { return metricstest.Value(t, n.reg, "headcount_wsnode_connections_open") == 0 }, wait, tick)
	stats, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	require.NotContains(t, stats, "cmdstat_hgetall")
	keys, err := rdb.Keys(context.Background(), "*resume*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
}

// TestResumeFollowsAuthorization: a guessed id gets nothing of a private
// channel it is not authorised for: its subscribe is refused as any
// other, and no event follows.
func TestResumeFollowsAuthorization(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	const id, ch = "page-private-1", "private-chat-kept-1"
	rule := apps.History{Prefix: "private-chat-kept", Events: 10, Seconds: 600}
	c, sid := n.dialResume(t, id)
	subscribePrivate(t, c, sid, ch)
	publishN(t, n, ch, rule, 0, 2)
	requireConsecutive(t, readNumbers(t, c, ch, 1), 0, 1)
	ackPing(t, c)
	require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
	waitSaved(t, n.rdb(t), id, ch)
	publishN(t, n, ch, rule, 2, 4)

	guess, _ := n.dialResume(t, id)
	send(t, guess, subscribeFrame(ch, appKey+":"+strings.Repeat("0", 64), ""))
	f := read(t, guess)
	require.Equal(t, "pusher:subscription_error", f.Event, f.raw)
	pingPong(t, guess) // nothing came before the pong, not even a ping
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_replayed_events_total"))
	require.Zero(t, metricstest.Value(t, n.reg, "headcount_wsnode_resumes_total"))
}

// TestResubscribeResumes: a page that leaves a history channel and
// subscribes to it again on the same connection gets what was published
// meanwhile, and nothing it was sent already (acknowledged or not).
func TestResubscribeResumes(t *testing.T) {
	t.Parallel()
	n := startNode(t).run(t)
	const ch = "kept-again"
	c, _ := n.dialResume(t, "page-resubscribe")
	subscribeAnswering(t, c, ch)
	publishN(t, n, ch, keptRule, 0, 3)
	requireConsecutive(t, readNumbers(t, c, ch, 2), 0, 2)
	send(t, c, `{"event":"pusher:unsubscribe","data":{"channel":"`+ch+`"}}`)
	quiet(t, c)
	publishN(t, n, ch, keptRule, 3, 5)
	subscribeAnswering(t, c, ch)
	requireConsecutive(t, readNumbers(t, c, ch, 4), 3, 4)
	quiet(t, c)
}
