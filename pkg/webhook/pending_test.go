package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// TestALostReadIsTakenBack: events the holder's read took from the log
// whose reply it never got (Redis restarted or the link broke mid-reply)
// stay pending under its name while the holding goes on. They are counted
// in its backlog, delivered, their markers released and the log trimmed,
// and the channel logs its next change. It failed when only a new
// holding took pending entries back: they stayed pending for good, the
// backlog said 0, the channel's markers stayed in the index, so it logged
// nothing more, and trimming stopped at them.
func TestALostReadIsTakenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	direct := srv.Client(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = viaProxy.Close() })
	f := newFixture(t, viaProxy)
	var failing atomic.Bool
	failing.Store(true)
	f.rcv.fail = func(line string) bool { return failing.Load() && strings.Fields(line)[1] == "c" }
	// A lease that outlives the partition, as one in an append-only file
	// outlives a restart: the holding goes on, so no takeover recovers
	// the entries.
	_, reg := f.start(t, "r1", Options{LeaseTTL: time.Minute, TrimEvery: 50 * time.Millisecond, Debounce: 100 * time.Millisecond})
	ctx := context.Background()
	key := eventlog.Key(keyspace.Space{}, f.app.ID)
	group := groupName(f.app.Webhooks[0].URL)
	warmUp(t, f, direct, key, group)

	// The holder's link breaks; meanwhile a channel is occupied, and its
	// two markers are read under the holder's name: by its own read, whose
	// reply the partition drops, or by this one.
	proxy.Partition()
	rec := counts.NewRecorder(direct, "n1", counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t),
		LogEvents: func(string) eventlog.Spec { return LogSpec(f.app) }})
	rec.Add(f.app.ID, "c", 1)
	require.NoError(t, rec.Flush(ctx))
	if err := direct.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "r1", Streams: []string{key, ">"}, Block: -1}).Err(); !errors.Is(err, redis.Nil) {
		require.NoError(t, err) // redis.Nil: the holder's read took them
	}
	p, err := direct.XPending(ctx, key, group).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"r1": 2}, p.Consumers)
	stuck := []string{p.Lower, p.Higher}
	proxy.Heal()

	depth := func() float64 { return summed(t, reg, "headcount_webhook_queue_depth") }
	oldest := func() float64 { return summed(t, reg, "headcount_webhook_oldest_pending_timestamp_seconds") }
	require.Eventually(t, func() bool { return depth() == 2 && oldest() > 0 },
		10*time.Second, 10*time.Millisecond, "the events read under the holder's name are not in its backlog")
	failing.Store(false)
	require.ElementsMatch(t, []string{"channel_occupied c", "subscription_count c 1"}, f.rcv.waitFor(t, 3)[1:])

	require.Eventually(t, func() bool {
		p, err := direct.XPending(ctx, key, group).Result()
		n, xerr := direct.XLen(ctx, key).Result()
		return err == nil && xerr == nil && p.Count == 0 && n <= 1
	}, 10*time.Second, 10*time.Millisecond, "the events were never acknowledged, or the log never trimmed")
	index, err := direct.HGetAll(ctx, eventlog.IndexKey(keyspace.Space{}, f.app.ID)).Result()
	require.NoError(t, err)
	for field, id := range index {
		require.NotContains(t, stuck, id, "marker %q still in the index", field)
	}
	// The channel logs its next change.
	rec.Add(f.app.ID, "c", -1)
	require.NoError(t, rec.Flush(ctx))
	require.Contains(t, f.rcv.waitFor(t, 4)[3:], "channel_vacated c")
}

// TestADeposedHoldersReadIsTakenBack: an event another consumer read
// after the holder's takeover (a deposed holder that had not noticed yet)
// and left pending is taken back by the holder once it has been idle
// longer than that consumer can still be posting it, and delivered. It
// failed when only a new holding took pending events back.
func TestADeposedHoldersReadIsTakenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	direct := srv.Client(t)
	proxy := redistest.NewProxy(t, srv.Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = viaProxy.Close() })
	f := newFixture(t, viaProxy)
	f.start(t, "r1", Options{LeaseTTL: time.Second})
	ctx := context.Background()
	key := eventlog.Key(keyspace.Space{}, f.app.ID)
	group := groupName(f.app.Webhooks[0].URL)
	warmUp(t, f, direct, key, group)

	// Cut off for a moment, so the holder cannot read the event first;
	// then it is another consumer's.
	proxy.Partition()
	_, err := Append(ctx, direct, keyspace.Space{}, f.app, Event{Name: ChannelOccupied, Channel: "late"})
	require.NoError(t, err)
	msgs, err := direct.XRevRangeN(ctx, key, "+", "-", 1).Result()
	require.NoError(t, err)
	if err := direct.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "deposed", Streams: []string{key, ">"}, Block: -1}).Err(); !errors.Is(err, redis.Nil) {
		require.NoError(t, err) // redis.Nil: the holder's read took it, its reply dropped
	}
	require.NoError(t, direct.XClaim(ctx, &redis.XClaimArgs{Stream: key, Group: group, Consumer: "deposed", Messages: []string{msgs[0].ID}}).Err())
	proxy.Heal()

	require.Equal(t, "channel_occupied late", f.rcv.waitFor(t, 2)[1])
	require.Eventually(t, func() bool {
		p, err := direct.XPending(ctx, key, group).Result()
		return err == nil && p.Count == 0
	}, 10*time.Second, 10*time.Millisecond, "the event was never acknowledged")
}

// TestRedisCrashesLoseNoWebhook: Redis killed with SIGKILL again and again
// (its append-only file synced at every write, so its leases and consumer
// groups survive) while events are logged and delivered: every event Redis
// said it logged reaches the receiver, and then the log is trimmed. A read
// whose reply a crash lost used to leave its events pending for good, and
// the log untrimmed from them on.
func TestRedisCrashesLoseNoWebhook(t *testing.T) {
	t.Parallel()
	srv := redistest.NewDurable(t)
	rdb := srv.Client(t)
	f := newFixture(t, rdb)
	// A lease that outlives each restart: the holding goes on through it.
	for _, r := range []string{"r1", "r2"} {
		f.start(t, r, Options{LeaseTTL: 5 * time.Second, TrimEvery: 100 * time.Millisecond})
	}
	ctx := context.Background()
	var (
		mu     sync.Mutex
		logged []string // the receiver's lines of the events Append said it logged
	)
	stop, appended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(appended)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ev := Event{Name: ClientEvent, Channel: fmt.Sprint("private-", i%4), Event: "client-n", Data: strconv.Itoa(i), SocketID: "1.1"}
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := Append(actx, rdb, keyspace.Space{}, f.app, ev)
			cancel()
			if err == nil {
				mu.Lock()
				logged = append(logged, strings.Join([]string{ev.Name, ev.Channel, ev.Event, ev.Data, ev.SocketID}, " "))
				mu.Unlock()
			}
		}
	}()
	received := func() []string {
		f.rcv.mu.Lock()
		defer f.rcv.mu.Unlock()
		require.Empty(t, f.rcv.errs)
		return slices.Clone(f.rcv.got)
	}
	waitUntil := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !ok(); {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	crashes := 0
	for end := time.Now().Add(30 * time.Second); crashes < 8 && time.Now().Before(end); crashes++ {
		// Deliveries under way, so the crash finds the holder reading.
		n := len(received())
		waitUntil(fmt.Sprintf("no delivery after %d crashes", crashes), 15*time.Second, func() bool { return len(received()) >= n+50 })
		srv.KillAndHold(t)
		srv.Recover(t)
	}
	close(stop)
	<-appended
	mu.Lock()
	want := slices.Clone(logged)
	mu.Unlock()
	t.Logf("%d crashes, %d events logged", crashes, len(want))

	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		got := map[string]bool{}
		for _, line := range received() {
			got[line] = true
		}
		missing = slices.DeleteFunc(slices.Clone(want), func(line string) bool { return got[line] })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			key := eventlog.Key(keyspace.Space{}, f.app.ID)
			p, err := rdb.XPending(ctx, key, groupName(f.app.Webhooks[0].URL)).Result()
			t.Fatalf("%d of %d logged events never delivered, the first %q; pending: %+v %v", len(missing), len(want), missing[0], p, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	key := eventlog.Key(keyspace.Space{}, f.app.ID)
	waitUntil("the delivered log was never trimmed", 10*time.Second, func() bool {
		n, err := rdb.XLen(ctx, key).Result()
		return err == nil && n <= 1
	})
}

// warmUp delivers an event and waits for its acknowledgement, so the
// holding is past its takeover, reading new events.
func warmUp(t *testing.T, f *fixture, direct *redis.Client, key, group string) {
	t.Helper()
	f.append(t, Event{Name: ChannelOccupied, Channel: "warm-up"})
	f.rcv.waitFor(t, 1)
	require.Eventually(t, func() bool {
		p, err := direct.XPending(context.Background(), key, group).Result()
		return err == nil && p.Count == 0
	}, 10*time.Second, 10*time.Millisecond, "the warm-up event was never acknowledged")
}
