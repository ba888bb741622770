package fanout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Message is one event for the subscribers of one channel of one app.
type Message struct {
	Channel string `json:"channel"`
	Event   string `json:"event"`
	// Data is the event's data as the string Pusher sends (server frames carry data as a JSON string).
	Data string `json:"data,omitempty"`
	// UserID is the sender's user id on presence-channel client events ("" otherwise).
	UserID string `json:"user_id,omitempty"`
	// ExceptSocket is a socket id that must not receive the message (publisher's socket_id exclusion, client events never echoed).
	ExceptSocket string `json:"except_socket,omitempty"`
	// ExceptUser is a presence user id whose sockets must not receive it (member_added goes to the others).
	ExceptUser string `json:"except_user,omitempty"`
	// Version places the message among the count changes of its app
	// (counts.Edges.Versions, counts.MemberEdge.Version): a receiver that
	// got a higher subscription count drops a lower one, and a member
	// event reaches no subscriber whose member list was read at its
	// version or later. 0: unversioned.
	Version int64 `json:"version,omitempty"`
	// Serial is the message's place in its channel's history (package
	// history), set on receipt; "" for a channel without one.
	Serial string `json:"serial,omitempty"`
	// Keep is the history rule of the channel (apps.App.HistoryFor), set
	// by the publisher and not sent: with one (Events > 0) the message is
	// recorded and published by the history's script, and gets a Serial.
	Keep apps.History `json:"-"`
}

// Options configures a Bus. The zero value works.
type Options struct {
	// Keyspace names the topics; the zero Keyspace has the default
	// prefix. Buses of different keyspaces never hear each other.
	Keyspace keyspace.Space
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Registerer receives the bus's metrics; nil means none.
	Registerer prometheus.Registerer
	// History records the messages whose channel has a history (Keep);
	// nil means a store of the bus's Keyspace with the default budget and
	// no metrics.
	History *history.Store
}

// publishAttempts bounds the tries of a publish that certainly never
// reached Redis (the dial failed). go-redis's own retries are off for
// publishes, see noRetry.
const publishAttempts = 3

// interest is this node's local demand for one topic.
type interest struct {
	app, channel string
	refs         int
	// confirmed: Redis answered this node's subscribe to the topic.
	confirmed bool
}

// Bus fans events out between nodes through Redis pub/sub (sharded pub/sub
// on Redis Cluster). See the package documentation for its guarantees.
type Bus struct {
	keys
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // nil on a single Redis
	hist    *history.Store
	log     hclog.Logger
	m       *metrics

	// mu guards the desired state. Join and Leave only touch it, never
	// Redis; Run's reconcile loop turns dirty entries into commands.
	mu    sync.RWMutex
	want  map[string]*interest // topic -> interest, present while refs > 0
	dirty map[string]string    // topic -> app, changed since the last reconcile
	wake  chan struct{}
	// confirmed, if not nil, is closed when Redis confirms a subscribe
	// (WaitJoined).
	confirmed chan struct{}

	running atomic.Bool

	// smu guards started and syncs (Sync).
	smu sync.Mutex
	// started holds the shards whose receive loop runs, by shardKey.
	started map[string]*shard
	// syncs holds, by ping payload, the Syncs waiting for their pong.
	syncs   map[string]chan struct{}
	syncSeq atomic.Uint64

	// hmu guards the health state, shared by the shards' receive loops.
	hmu      sync.Mutex
	live     bool      // Run is running
	down     int       // shards without a confirmed connection
	outage   bool      // an outage was logged and its end not yet
	outageAt time.Time // when the logged outage began

	// deliverMu serializes deliver calls: on Redis Cluster each app has its
	// own receive loop, and callers are simpler if deliver is never
	// concurrent.
	deliverMu sync.Mutex

	// decodeLog holds decode errors, which come in floods (from a node of a
	// newer version, say), to a line per logging.RepeatEvery.
	decodeLog logging.Limiter
	pingEvery time.Duration // defaultPingEvery; tests shorten it
}

// New returns a Bus publishing and subscribing through rdb, as
// redisx.NewClient returns it. On a *redis.ClusterClient it uses sharded
// pub/sub (SPUBLISH/SSUBSCRIBE), since plain PUBLISH on a cluster is
// broadcast to every shard. A *redis.Ring is not supported: its Subscribe
// needs a channel up front.
func New(rdb redis.UniversalClient, opts Options) *Bus {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	cc, _ := rdb.(*redis.ClusterClient)
	hist := opts.History
	if hist == nil {
		hist = history.New(rdb, history.Options{Keyspace: opts.Keyspace, Logger: log})
	}
	return &Bus{
		hist:    hist,
		keys:    keys{opts.Keyspace},
		rdb:     rdb,
		cluster: cc,
		log:     log.Named("fanout"),
		m:       newMetrics(opts.Registerer),
		want:    make(map[string]*interest),
		dirty:   make(map[string]string),
		wake:    make(chan struct{}, 1),
		started: make(map[string]*shard),
		syncs:   make(map[string]chan struct{}),

		pingEvery: defaultPingEvery,
	}
}

var errInvalid = errors.New("app, channel and event must not be empty")

// Publish sends m to every node that has subscribers of m.Channel in app.
// Order is kept per channel for one publisher: a Publish that returned is
// delivered before any later Publish of the same Bus on that channel. A
// publish that fails may or may not have been delivered; it is never sent
// twice.
func (b *Bus) Publish(ctx context.Context, app string, m Message) error {
	if app == "" || m.Channel == "" || m.Event == "" {
		return fmt.Errorf("publish %q on channel %q of app %q: %w", m.Event, m.Channel, app, errInvalid)
	}
	topic := b.topic(app, m.Channel)
	payload := encode(&m)
	start := time.Now()
	var err error
	for attempt := 1; ; attempt++ {
		err = b.publishOne(ctx, app, topic, &m, payload)
		if err == nil || attempt == publishAttempts || !neverSent(err) ||
			!clock.Sleep(ctx, time.Duration(attempt)*10*time.Millisecond) {
			break
		}
	}
	b.m.publishDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		b.m.publishErrors.Inc()
		return fmt.Errorf("publish %q on channel %q of app %q: %w", m.Event, m.Channel, app, err)
	}
	b.m.published.Inc()
	return nil
}

// publishOne publishes m once: by PUBLISH, or on a channel with a history
// by the history's script, sent again by EVAL only if EVALSHA proved it
// never ran (NOSCRIPT).
func (b *Bus) publishOne(ctx context.Context, app, topic string, m *Message, payload []byte) error {
	if m.Keep.Events <= 0 {
		return b.rdb.Process(ctx, b.publishCmd(ctx, topic, payload))
	}
	var err error
	for _, eval := range []bool{false, true} {
		c := b.recordCmd(ctx, eval, app, topic, m, payload)
		if err = b.rdb.Process(ctx, c); err == nil {
			_, err = b.hist.Published(ctx, app, c)
			return err
		}
		if !history.NoScript(err) {
			break
		}
	}
	return err
}

// recordCmd is the history's publish of m (see publishOne).
func (b *Bus) recordCmd(ctx context.Context, eval bool, app, topic string, m *Message, payload []byte) history.Publish {
	return b.hist.PublishCmd(ctx, eval, app, m.Channel, m.Keep,
		history.Event{Event: m.Event, Data: m.Data, UserID: m.UserID}, topic, payload, b.cluster != nil)
}

// History is the store that records the bus's messages with a history.
func (b *Bus) History() *history.Store { return b.hist }

func (b *Bus) publishCmd(ctx context.Context, topic string, payload []byte) redis.Cmder {
	verb := "publish"
	if b.cluster != nil {
		verb = "spublish"
	}
	cmd := redis.NewIntCmd(ctx, verb, topic, payload)
	// The cluster client routes SPUBLISH by its first key; say where it is,
	// so routing does not depend on COMMAND INFO having been loaded.
	cmd.SetFirstKeyPos(1)
	return noRetry{cmd}
}

// noRetry stops go-redis from sending a publish again after its reply was
// lost (it retries on EOF and timeouts): Redis may already have delivered
// the first copy, and a second one would break exactly-once delivery.
// Losing the event instead is within the at-most-once guarantee.
type noRetry struct{ *redis.IntCmd }

// NoRetry implements redis.Cmder.
func (noRetry) NoRetry() bool { return true }

// neverSent reports whether err proves the command never reached Redis, so
// trying again cannot deliver it twice.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.Is(err, redis.ErrPoolTimeout) || (errors.As(err, &op) && op.Op == "dial")
}

// Join registers local interest in app's channel (ref-counted); the first
// Join subscribes in Redis. It never blocks on Redis: the subscribe is sent
// by Run, batched with others. Calls with an empty app or channel are
// ignored.
func (b *Bus) Join(app, channel string) {
	if app == "" || channel == "" {
		return
	}
	topic := b.topic(app, channel)
	b.mu.Lock()
	if in := b.want[topic]; in != nil {
		in.refs++
		b.mu.Unlock()
		return
	}
	b.want[topic] = &interest{app: app, channel: channel, refs: 1}
	b.dirty[topic] = app
	b.mu.Unlock()
	b.poke()
}

// WaitJoined waits until Redis has confirmed this node's subscribe to each
// of app's channels that is joined (or ctx ends). A publish after it
// reaches this node's subscribers. Without it, an event published right
// after a Join, like the subscription_count a subscribe causes, can pass
// the subscribe and never arrive: Join only queues the subscribe.
func (b *Bus) WaitJoined(ctx context.Context, app string, channels []string) error {
	for _, ch := range channels {
		topic := b.topic(app, ch)
		for {
			b.mu.Lock()
			in := b.want[topic]
			if in == nil || in.confirmed {
				b.mu.Unlock()
				break
			}
			if b.confirmed == nil {
				b.confirmed = make(chan struct{})
			}
			confirmed := b.confirmed
			b.mu.Unlock()
			select {
			case <-confirmed:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// confirm records Redis's answer to a subscribe of topic.
func (b *Bus) confirm(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if in := b.want[topic]; in != nil && !in.confirmed {
		in.confirmed = true
		if b.confirmed != nil {
			close(b.confirmed)
			b.confirmed = nil
		}
	}
}

// isConfirmed reports whether topic is joined and Redis has confirmed
// its subscribe.
func (b *Bus) isConfirmed(topic string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	in := b.want[topic]
	return in != nil && in.confirmed
}

// Leave drops one unit of interest; the last Leave unsubscribes. Delivery
// for the channel stops at once, before Redis confirms the unsubscribe. It
// never blocks on Redis. A Leave without a matching Join is ignored.
func (b *Bus) Leave(app, channel string) {
	topic := b.topic(app, channel)
	b.mu.Lock()
	in := b.want[topic]
	if in == nil {
		b.mu.Unlock()
		return
	}
	if in.refs--; in.refs > 0 {
		b.mu.Unlock()
		return
	}
	delete(b.want, topic)
	b.dirty[topic] = app
	b.mu.Unlock()
	b.poke()
}

func (b *Bus) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Healthy reports whether the Redis subscriptions are currently
// established: Run is running and every subscription connection has
// answered since it was last (re)dialled. With nothing to subscribe to on
// Redis Cluster it is true; on a single Redis the one connection is kept
// open, so it tracks Redis even then.
func (b *Bus) Healthy() bool {
	b.hmu.Lock()
	defer b.hmu.Unlock()
	return b.live && b.down == 0
}

// errNoConnection is Sync's error when no subscription connection carries
// the app's channels.
var errNoConnection = errors.New("no subscription connection")

// Sync waits until every message Redis sent this node on the connection
// that carries app's channels before Sync was called has been handed to
// Run's deliver callback: it sends a PING on that connection, and Redis
// answers it after everything it pushed there before. So once a node has
// joined a channel (WaitJoined) and then read some state, Sync makes sure
// that every event published before that read has reached deliver. It
// fails if the app has no connection, or it broke before the answer came.
func (b *Bus) Sync(ctx context.Context, app string) error {
	key := ""
	if b.cluster != nil {
		key = app
	}
	token := "sync-" + strconv.FormatUint(b.syncSeq.Add(1), 10)
	done := make(chan struct{})
	b.smu.Lock()
	sh := b.started[key]
	if sh != nil {
		b.syncs[token] = done
	}
	b.smu.Unlock()
	if sh == nil {
		return fmt.Errorf("sync with the channels of app %q: %w", app, errNoConnection)
	}
	defer b.synced(token)
	if err := sh.ps.Ping(ctx, token); err != nil {
		return fmt.Errorf("sync with the channels of app %q: %w", app, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sync with the channels of app %q: %w", app, ctx.Err())
	}
}

// synced ends the Sync waiting for token, if any (the receive loop read
// its pong; other pongs have an empty payload).
func (b *Bus) synced(token string) {
	if token == "" {
		return
	}
	b.smu.Lock()
	if done := b.syncs[token]; done != nil {
		close(done)
		delete(b.syncs, token)
	}
	b.smu.Unlock()
}

func (b *Bus) wanted(topic string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	_, ok := b.want[topic]
	return ok
}
