package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// DefaultBudget is an app's byte budget when --history-budget is not set.
const DefaultBudget = 64 << 20

// EvictPerPublish bounds the entries one publish removes for the budget,
// so no publish does work that grows with the app's size. Being more than
// one, a stream of publishes over budget takes the history back under it.
const EvictPerPublish = 16

// evictRounds bounds the evict scripts one publish runs: each declares the
// streams of the lowest heads it read, and a round ends early only when
// another publish moved the heads meanwhile.
const evictRounds = 3

// Options configures a Store. The zero value works.
type Options struct {
	// Keyspace names the keys; the zero Keyspace has the default prefix.
	Keyspace keyspace.Space
	// Budget bounds the bytes (events' names, data and user ids) of each
	// app's histories; 0 means DefaultBudget.
	Budget int64
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Registerer receives the store's metrics; nil means none.
	Registerer prometheus.Registerer
}

// Store records and reads the channels' histories. Its methods are safe
// for concurrent use.
type Store struct {
	keys
	rdb     redis.UniversalClient
	budget  int64
	log     hclog.Logger
	dropped *prometheus.CounterVec
	// dropLog holds the budget's removals, which come in floods once an
	// app is over it, to a line per logging.RepeatEvery.
	dropLog logging.Limiter
}

// New returns a Store on rdb.
func New(rdb redis.UniversalClient, opts Options) *Store {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	budget := opts.Budget
	if budget <= 0 {
		budget = DefaultBudget
	}
	s := &Store{keys: keys{opts.Keyspace}, rdb: rdb, budget: budget, log: log.Named("history"),
		dropped: promauto.With(opts.Registerer).NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_history_dropped_total",
			Help: "Events removed from an app's channel histories before their channel's events or seconds said, by reason: budget (the app's histories were over --history-budget-mb).",
		}, []string{"app", "reason"}),
	}
	return s
}

// Event is one event of a channel's history.
type Event struct {
	// Serial is the event's place in its channel's history: a Redis stream
	// id, "<ms>-<seq>", increasing in the order subscribers received the
	// events.
	Serial string `json:"serial"`
	Event  string `json:"event"`
	Data   string `json:"data"`
	UserID string `json:"user_id,omitempty"`
}

// Publish is the command that records one event in its channel's
// history and publishes it, the serial appended to its payload
// (scripts/publish.lua). go-redis never sends it twice: Redis may have
// run it and published the event already.
type Publish struct{ *redis.Cmd }

// NoRetry implements redis.Cmder.
func (Publish) NoRetry() bool { return true }

// Serial is the serial the event got, once the command ran.
func (p Publish) Serial() (string, error) {
	v, err := p.Slice()
	if err != nil {
		return "", err
	}
	if len(v) != 2 {
		return "", fmt.Errorf("unexpected reply %v", v)
	}
	id, _ := v[0].(string)
	return id, nil
}

// PublishCmd returns the command that records e in app's channel's
// history under rule and publishes payload, with the serial appended, on
// topic (a Redis Pub/Sub channel of app's hash tag, which package fanout
// names; SPUBLISH when shard is set, for Redis Cluster). It runs the
// script by EVALSHA, or by EVAL with eval set: send it again with eval
// only when NoScript says so, which proves it never ran.
func (s *Store) PublishCmd(ctx context.Context, eval bool, app, channel string, rule apps.History, e Event, topic string, payload []byte, shard bool) Publish {
	verb := "publish"
	if shard {
		verb = "spublish"
	}
	args := []any{"evalsha", publishScript.Hash()}
	if eval {
		args = []any{"eval", publishScript.Source()}
	}
	args = append(args, 4, s.stream(app, channel), topic, s.sizes(app), s.heads(app),
		channel, rule.Events, int64(rule.Seconds)*1000, s.budget,
		e.Event, e.Data, e.UserID, payload, verb)
	c := redis.NewCmd(ctx, args...)
	c.SetFirstKeyPos(3)
	return Publish{c}
}

// NoScript reports whether err is Redis's NOSCRIPT: the script was not
// run, so sending it again by EVAL cannot record or publish twice.
func NoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// Published takes note of a publish's reply and returns the event's
// serial. When the reply says the app's histories are over the budget, it
// gives up the entries closest to expiring (evict), counted and logged. A
// failed eviction fails nothing: the event was published, and the next
// publish over the budget evicts again.
func (s *Store) Published(ctx context.Context, app string, p Publish) (string, error) {
	id, err := p.Serial()
	if err != nil {
		return "", err
	}
	// At 0 from the app's first event kept, so that the first drops
	// show as an increase.
	dropped := s.dropped.WithLabelValues(app, "budget")
	if v, _ := p.Slice(); v[1] == int64(1) {
		s.evict(ctx, app, dropped)
	}
	return id, nil
}

// evict removes up to EvictPerPublish entries of app's histories, the
// closest to expiring first, while they are over the budget.
func (s *Store) evict(ctx context.Context, app string, dropped prometheus.Counter) {
	removed := 0
	var err error
	for range evictRounds {
		var chans []string
		if chans, err = s.rdb.ZRange(ctx, s.heads(app), 0, EvictPerPublish-1).Result(); err != nil || len(chans) == 0 {
			break
		}
		ks := []string{s.sizes(app), s.heads(app)}
		args := []any{s.budget, EvictPerPublish - removed}
		for _, c := range chans {
			ks, args = append(ks, s.stream(app, c)), append(args, c)
		}
		var v []int64
		if v, err = evictScript.Run(ctx, s.rdb, ks, args...).Int64Slice(); err == nil && len(v) != 2 {
			err = fmt.Errorf("unexpected reply %v", v)
		}
		if err != nil {
			break
		}
		removed += int(v[0])
		if v[1] == 0 || removed >= EvictPerPublish {
			break
		}
	}
	if removed > 0 {
		dropped.Add(float64(removed))
	}
	if removed == 0 && err == nil {
		return
	}
	if k, ok := s.dropLog.Allow(time.Now()); ok {
		if err != nil {
			s.log.Warn("channel histories over their byte budget: removing their oldest events failed; the next publish tries again",
				"app", app, "budget_bytes", s.budget, "error", err)
			return
		}
		s.log.Warn("channel histories over their byte budget: the oldest events are removed early (--history-budget-mb)",
			"app", app, "budget_bytes", s.budget, "removals_since_last_line", k)
	}
}

// Last returns the last n events of app's channel, oldest first: fewer if
// its history holds fewer, none for a channel without one.
func (s *Store) Last(ctx context.Context, app, channel string, n int) ([]Event, error) {
	if n <= 0 {
		return nil, nil
	}
	msgs, err := s.rdb.XRevRangeN(ctx, s.stream(app, channel), "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("read the history of channel %q of app %q: %w", channel, app, err)
	}
	out := make([]Event, len(msgs))
	for i, m := range msgs {
		out[len(msgs)-1-i] = eventOf(m)
	}
	return out, nil
}

// Page is what Since read; as JSON, the body of GET .../events.
type Page struct {
	// Events follow the serial asked for, oldest first; never nil.
	Events []Event `json:"events"`
	// Lost: some events published after the serial are no longer in the
	// history (trimmed by its events or seconds, removed for the budget,
	// expired with an idle channel, or lost by Redis), so Events do not
	// follow it without a gap. It is also set when the history cannot tell
	// (it was started anew after the serial). Always false without a
	// serial.
	Lost bool `json:"lost"`
	// More: limit was reached; read again from the last event's serial.
	More bool `json:"more"`
}

// Since returns up to limit events of app's channel published after
// serial ("" : from the oldest it holds), and whether the history still
// reaches back to serial. A channel without a history is an empty,
// lost page when a serial is given: what followed it is not there.
func (s *Store) Since(ctx context.Context, app, channel, serial string, limit int) (Page, error) {
	if serial != "" {
		if err := CheckSerial(serial); err != nil {
			return Page{}, err
		}
	}
	if limit <= 0 {
		return Page{More: true}, nil
	}
	v, err := sinceScript.Run(ctx, s.rdb, []string{s.stream(app, channel)}, serial, limit+1).Slice()
	if err != nil {
		return Page{}, fmt.Errorf("read the history of channel %q of app %q: %w", channel, app, err)
	}
	p := Page{Lost: len(v) > 0 && v[0] == int64(1), Events: []Event{}}
	for _, e := range v[min(1, len(v)):] {
		m, err := messageOf(e)
		if err != nil {
			return Page{}, fmt.Errorf("read the history of channel %q of app %q: %w", channel, app, err)
		}
		p.Events = append(p.Events, eventOf(m))
	}
	if len(p.Events) > limit {
		p.Events, p.More = p.Events[:limit], true
	}
	return p, nil
}

// Bytes returns the bytes app's histories hold as the budget counts them.
func (s *Store) Bytes(ctx context.Context, app string) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.sizes(app), "").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Budget is the byte budget of each app's histories.
func (s *Store) Budget() int64 { return s.budget }

func eventOf(m redis.XMessage) Event {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	return Event{Serial: m.ID, Event: str("e"), Data: str("d"), UserID: str("u")}
}

// messageOf reads one entry of a script's XRANGE reply.
func messageOf(v any) (redis.XMessage, error) {
	e, ok := v.([]any)
	if !ok || len(e) != 2 {
		return redis.XMessage{}, fmt.Errorf("unexpected entry %v", v)
	}
	id, _ := e[0].(string)
	kv, _ := e[1].([]any)
	m := redis.XMessage{ID: id, Values: make(map[string]any, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		m.Values[k] = kv[i+1]
	}
	return m, nil
}
