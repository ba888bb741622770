package history_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// TestMain fails the package if goroutines outlive its tests (redistest.Main).
func TestMain(m *testing.M) { redistest.Main(m) }

const (
	wait = 20 * time.Second
	tick = 5 * time.Millisecond
)

var chat = apps.History{Prefix: "chat-", Events: 100, Seconds: 600}

// subscriber is a Bus running, joined to channels, recording deliveries.
type subscriber struct {
	*fanout.Bus
	mu  sync.Mutex
	got map[string][]fanout.Message
}

func subscribe(t *testing.T, rdb redis.UniversalClient, app string, channels ...string) *subscriber {
	t.Helper()
	s := &subscriber{Bus: fanout.New(rdb, fanout.Options{Logger: logging.TestLogger(t)}), got: map[string][]fanout.Message{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(_ string, m fanout.Message) {
			s.mu.Lock()
			s.got[m.Channel] = append(s.got[m.Channel], m)
			s.mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	for _, ch := range channels {
		s.Join(app, ch)
	}
	wctx, wcancel := context.WithTimeout(ctx, wait)
	defer wcancel()
	require.NoError(t, s.WaitJoined(wctx, app, channels))
	return s
}

func (s *subscriber) waitFor(t *testing.T, channel string, n int) []fanout.Message {
	t.Helper()
	var got []fanout.Message
	require.Eventually(t, func() bool {
		s.mu.Lock()
		got = append([]fanout.Message(nil), s.got[channel]...)
		s.mu.Unlock()
		return len(got) >= n
	}, wait, tick, "%s: %d of %d deliveries", channel, len(got), n)
	return got
}

// later reports whether serial a is after b.
func later(t *testing.T, a, b string) bool {
	t.Helper()
	var am, as, bm, bs uint64
	_, err := fmt.Sscanf(a, "%d-%d", &am, &as)
	require.NoError(t, err)
	_, err = fmt.Sscanf(b, "%d-%d", &bm, &bs)
	require.NoError(t, err)
	return am > bm || (am == bm && as > bs)
}

// TestSerialOrderIsDeliveryOrder: publishers on several buses publish at
// once on one channel; every subscriber receives each event once, with
// serials increasing in the order it received them, and the history holds
// the same events in the same order under the same serials.
func TestSerialOrderIsDeliveryOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		const app, ch, publishers, each = "a", "chat-1", 4, 25
		subs := []*subscriber{subscribe(t, b.Client(t), app, ch), subscribe(t, b.Client(t), app, ch)}
		var wg sync.WaitGroup
		for p := range publishers {
			bus := fanout.New(b.Client(t), fanout.Options{})
			wg.Go(func() {
				for i := range each {
					err := bus.Publish(context.Background(), app, fanout.Message{Channel: ch, Event: "e",
						Data: fmt.Sprintf("%d/%d", p, i), Keep: chat})
					if err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		held, err := history.New(b.Client(t), history.Options{}).Last(context.Background(), app, ch, publishers*each)
		require.NoError(t, err)
		require.Len(t, held, publishers*each)
		for _, s := range subs {
			got := s.waitFor(t, ch, publishers*each)
			require.Len(t, got, publishers*each)
			for i, m := range got {
				require.Equal(t, held[i].Serial, m.Serial, "delivery %d", i)
				require.Equal(t, held[i].Data, m.Data, "delivery %d", i)
				if i > 0 {
					require.True(t, later(t, m.Serial, got[i-1].Serial), "%s after %s", m.Serial, got[i-1].Serial)
				}
			}
		}
	})
}

// TestRandomInterleavings: random sequences of publishes (through Publish
// and PublishBatch, on two channels with a history and one without),
// trims and reads. Against a model: Last returns the newest events the
// channel's events allow, in publish order; Since from any serial
// returns what followed it, and says Lost exactly when something that
// followed it was trimmed.
func TestRandomInterleavings(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		rule := apps.History{Prefix: "chat-", Events: 5, Seconds: 600}
		bus := fanout.New(rdb, fanout.Options{})
		store := bus.History()
		for seed := range uint64(6) {
			app := "r" + strconv.FormatUint(seed, 10)
			rng := rand.New(rand.NewPCG(seed, 41))
			channels := []string{"chat-x", "chat-y", "plain"}
			sub := subscribe(t, b.Client(t), app, channels...)
			model := map[string][]history.Event{} // every event published, in order
			sent := map[string]int{}
			for step := range 60 {
				ch := channels[rng.IntN(len(channels))]
				keep := apps.History{}
				if ch != "plain" {
					keep = rule
				}
				switch op := rng.IntN(5); {
				case op < 2:
					m := fanout.Message{Channel: ch, Event: "e", Data: strconv.Itoa(step), Keep: keep}
					require.NoError(t, bus.Publish(ctx, app, m))
					model[ch] = append(model[ch], history.Event{Event: "e", Data: m.Data})
					sent[ch]++
				case op < 4:
					var batch []fanout.Message
					for range 1 + rng.IntN(3) {
						c := channels[rng.IntN(len(channels))]
						k := apps.History{}
						if c != "plain" {
							k = rule
						}
						batch = append(batch, fanout.Message{Channel: c, Event: "b", Data: strconv.Itoa(step), Keep: k})
						model[c] = append(model[c], history.Event{Event: "b", Data: strconv.Itoa(step)})
						sent[c]++
					}
					require.NoError(t, bus.PublishBatch(ctx, app, batch, nil))
				default:
					for _, c := range channels[:2] {
						got := sub.waitFor(t, c, sent[c])
						checkReads(t, store, app, c, rule.Events, model[c], got)
					}
				}
			}
			n, err := rdb.Exists(ctx, keyspace.Space{}.App(app)+"hist:plain").Result()
			require.NoError(t, err)
			require.Zero(t, n, "a channel without a rule has no stream")
			for _, m := range sub.waitFor(t, "plain", sent["plain"]) {
				require.Empty(t, m.Serial, "a channel without a rule gets no serial")
			}
		}
	})
}

// checkReads compares Last and Since with the model: every event
// published on the channel, whose deliveries (with serials) are got.
func checkReads(t *testing.T, store *history.Store, app, ch string, events int, model []history.Event, got []fanout.Message) {
	t.Helper()
	ctx := context.Background()
	require.Len(t, got, len(model))
	for i := range model {
		model[i].Serial = got[i].Serial
		require.Equal(t, model[i].Data, got[i].Data)
	}
	kept := model[max(0, len(model)-events):]
	last, err := store.Last(ctx, app, ch, events+3)
	require.NoError(t, err)
	require.Equal(t, append([]history.Event{}, kept...), last)
	for i, e := range model {
		p, err := store.Since(ctx, app, ch, e.Serial, 2)
		require.NoError(t, err)
		after := model[i+1:]
		lost := len(after) > len(kept) // something after e was trimmed
		require.Equal(t, lost, p.Lost, "since event %d of %d", i, len(model))
		want := kept
		if !lost {
			want = after
		}
		require.Equal(t, append([]history.Event{}, want[:min(2, len(want))]...), p.Events)
		require.Equal(t, len(want) > 2, p.More)
	}
	p, err := store.Since(ctx, app, ch, "", events+1)
	require.NoError(t, err)
	require.Equal(t, append([]history.Event{}, kept...), p.Events)
	require.False(t, p.Lost)
}

// TestBudget: an app's histories stay within the byte budget, the events
// closest to expiring go first, each counted in the drop metric; a stream
// that expired whole gives its bytes back before any live event goes.
func TestBudget(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		reg := prometheus.NewRegistry()
		const size = 100 // bytes of one event: "e" and 99 bytes of data
		store := history.New(rdb, history.Options{Budget: 10 * size, Registerer: reg})
		bus := fanout.New(rdb, fanout.Options{History: store})
		data := func(i int) string { return fmt.Sprintf("%099d", i) }
		short := apps.History{Prefix: "chat-short-", Events: 100, Seconds: 1}
		sub := subscribe(t, b.Client(t), "a", "chat-0", "chat-1", "chat-2")

		// Stale bytes: a stream that expired whole still counts until a
		// publish over budget finds it.
		require.NoError(t, bus.Publish(ctx, "a", fanout.Message{Channel: "chat-short-1", Event: "e", Data: data(0), Keep: short}))
		require.Eventually(t, func() bool {
			n, err := rdb.Exists(ctx, keyspace.Space{}.App("a")+"hist:chat-short-1").Result()
			require.NoError(t, err)
			return n == 0
		}, wait, 50*time.Millisecond, "the stream never expired")
		for i := range 10 {
			require.NoError(t, bus.Publish(ctx, "a", fanout.Message{Channel: "chat-" + strconv.Itoa(i%3), Event: "e", Data: data(i), Keep: chat}))
		}
		require.Zero(t, metricstest.Value(t, reg, "headcount_history_dropped_total", "app", "a", "reason", "budget"), "the expired stream's bytes went first")
		n, err := store.Bytes(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, int64(10*size), n)

		// Over budget: the oldest go, one per event let in.
		for i := 10; i < 40; i++ {
			require.NoError(t, bus.Publish(ctx, "a", fanout.Message{Channel: "chat-" + strconv.Itoa(i%3), Event: "e", Data: data(i), Keep: chat}))
			n, err := store.Bytes(ctx, "a")
			require.NoError(t, err)
			require.LessOrEqual(t, n, int64(10*size))
		}
		require.Equal(t, 30.0, metricstest.Value(t, reg, "headcount_history_dropped_total", "app", "a", "reason", "budget"))
		// Those held are the newest: none is older than one given up (by
		// the millisecond, the serials' resolution across channels).
		held, dropped := map[string]bool{}, uint64(0)
		for c := range 3 {
			ch := "chat-" + strconv.Itoa(c)
			evs, err := store.Last(ctx, "a", ch, 100)
			require.NoError(t, err)
			for _, e := range evs {
				held[ch+" "+e.Serial] = true
			}
			p, err := store.Since(ctx, "a", ch, "0-1", 100)
			require.NoError(t, err)
			require.True(t, p.Lost, "%s lost its oldest events to the budget", ch)
			for _, m := range sub.waitFor(t, ch, (40-c+2)/3) {
				if !held[ch+" "+m.Serial] {
					dropped = max(dropped, ms(t, m.Serial))
				}
			}
		}
		require.Len(t, held, 10)
		for k := range held {
			require.GreaterOrEqual(t, ms(t, strings.Fields(k)[1]), dropped)
		}
	})
}

func ms(t *testing.T, serial string) uint64 {
	t.Helper()
	var m, s uint64
	_, err := fmt.Sscanf(serial, "%d-%d", &m, &s)
	require.NoError(t, err)
	return m
}

// TestAgeTrim: an event older than its channel's seconds is trimmed by the
// next publish, and the stream expires with the channel's seconds.
func TestAgeTrim(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		bus := fanout.New(rdb, fanout.Options{})
		rule := apps.History{Prefix: "chat-", Events: 1000, Seconds: 1}
		require.NoError(t, bus.Publish(ctx, "a", fanout.Message{Channel: "chat-1", Event: "first", Keep: rule}))
		ttl, err := rdb.PTTL(ctx, keyspace.Space{}.App("a")+"hist:chat-1").Result()
		require.NoError(t, err)
		require.Positive(t, ttl)
		require.LessOrEqual(t, ttl, time.Second)
		deadline := time.Now().Add(wait)
		for {
			require.NoError(t, bus.Publish(ctx, "a", fanout.Message{Channel: "chat-1", Event: "later", Keep: rule}))
			evs, err := bus.History().Last(ctx, "a", "chat-1", 1000)
			require.NoError(t, err)
			if evs[0].Event != "first" {
				break
			}
			require.True(t, time.Now().Before(deadline), "the first event was never trimmed")
			time.Sleep(20 * time.Millisecond) // pacing the publishes, not waiting for a condition
		}
	})
}

// TestNoHistoryNoStream: a publish without a rule writes no history key
// and its subscribers get no serial.
func TestNoHistoryNoStream(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		sub := subscribe(t, b.Client(t), "a", "chat-1")
		bus := fanout.New(rdb, fanout.Options{})
		require.NoError(t, bus.Publish(ctx, "a", fanout.Message{Channel: "chat-1", Event: "e"}))
		require.NoError(t, bus.PublishBatch(ctx, "a", []fanout.Message{{Channel: "chat-1", Event: "b"}}, nil))
		for _, m := range sub.waitFor(t, "chat-1", 2) {
			require.Empty(t, m.Serial)
		}
		var found []string
		require.NoError(t, keyspace.ScanPrefix(ctx, rdb, keyspace.Space{}.App("a")+"hist", func(k string) { found = append(found, k) }))
		require.Empty(t, found)
	})
}

// TestNoScriptRunsOnce: after Redis lost its scripts (SCRIPT FLUSH, as a
// restart or a failover does), Publish and PublishBatch send the script
// again by EVAL, and each event is recorded and delivered once.
func TestNoScriptRunsOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := context.Background()
		flush := func() {
			t.Helper()
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }))
				return
			}
			require.NoError(t, rdb.ScriptFlush(ctx).Err())
		}
		sub := subscribe(t, b.Client(t), "a", "chat-1")
		bus := fanout.New(rdb, fanout.Options{})
		msg := func(i int) fanout.Message {
			return fanout.Message{Channel: "chat-1", Event: "e", Data: strconv.Itoa(i), Keep: chat}
		}
		flush()
		require.NoError(t, bus.Publish(ctx, "a", msg(1)))
		flush()
		require.NoError(t, bus.PublishBatch(ctx, "a", []fanout.Message{msg(2), msg(3)}, nil))
		require.NoError(t, bus.Publish(ctx, "a", msg(4)))
		held, err := bus.History().Last(ctx, "a", "chat-1", 10)
		require.NoError(t, err)
		require.Len(t, held, 4)
		got := sub.waitFor(t, "chat-1", 4)
		for i, m := range got {
			require.Equal(t, strconv.Itoa(i+1), m.Data)
			require.Equal(t, held[i].Serial, m.Serial)
		}
		require.NoError(t, sub.Sync(ctx, "a"))
		require.Len(t, sub.waitFor(t, "chat-1", 4), 4, "no event delivered twice")
	})
}
