package fanout

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/headcount/headcount/pkg/clock"
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
	// Version orders the messages of one channel that say the same thing
	// anew (a subscription count: counts.Edges.Versions): a receiver that
	// got a higher one drops a lower one. 0: unversioned.
	Version int64 `json:"version,omitempty"`
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
}

const (
	// subscribeBatch caps the channels of one SUBSCRIBE command, so a storm
	// of joins is a few commands, none of them huge.
	subscribeBatch = 1000
	// defaultPingEvery is how long a subscription connection may stay
	// silent before it is pinged. A connection silent for 3 times that is
	// declared dead and redialled (see receive).
	defaultPingEvery = 2 * time.Second
	// minBackoff and maxBackoff bound the wait between redials and retried
	// subscribes while Redis is unreachable.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
	// rebuildEvery rate-limits rebuilding a shard's connection after Redis
	// dropped its subscriptions (a slot moved), so a cluster still settling
	// its slot map is not hammered.
	rebuildEvery = time.Second
	// publishAttempts bounds the tries of a publish that certainly never
	// reached Redis (the dial failed). go-redis's own retries are off for
	// publishes, see noRetry.
	publishAttempts = 3
)

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
	return &Bus{
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
		err = b.rdb.Process(ctx, b.publishCmd(ctx, topic, payload))
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

// Run receives messages for joined channels and calls deliver for each, in
// publish order per channel, until ctx ends; then it closes its
// connections, waits for its goroutines and returns nil. Channels joined
// before Run are subscribed at once. deliver is never called concurrently
// and must not block long: every channel's delivery waits for it. Only one
// Run may be active at a time.
func (b *Bus) Run(ctx context.Context, deliver func(app string, m Message)) error {
	if deliver == nil {
		return errors.New("fanout: Run needs a deliver function")
	}
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("fanout: Run is already running")
	}
	defer b.running.Store(false)

	r := &runner{b: b, deliver: deliver, shards: make(map[string]*shard)}
	b.mu.Lock()
	for topic, in := range b.want {
		b.dirty[topic] = in.app
	}
	b.mu.Unlock()
	b.hmu.Lock()
	b.live = true
	b.hmu.Unlock()
	defer r.closeAll()

	if b.cluster == nil {
		// One connection carries every app's topics. Open it now, so
		// Healthy follows Redis even before the first Join.
		r.start(r.open(""))
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var backoff time.Duration
	for {
		if r.reconcile(ctx) {
			backoff = min(max(2*backoff, 100*time.Millisecond), maxBackoff)
			timer.Reset(backoff)
			// While failing, retry on the timer only: a storm of joins
			// during an outage must not turn into a storm of dials.
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
			continue
		}
		backoff = 0
		select {
		case <-ctx.Done():
			return nil
		case <-b.wake:
		}
	}
}

// runner is the state of one Run, owned by its goroutine except where noted.
type runner struct {
	b           *Bus
	deliver     func(app string, m Message)
	shards      map[string]*shard // by shardKey
	lastRebuild time.Time
}

// shard is one subscription connection (a go-redis PubSub) with its receive
// and ping goroutines.
type shard struct {
	key string
	ps  *redis.PubSub
	// topics is what Redis was asked to subscribe: true if the last
	// SUBSCRIBE for it was sent, false if it failed and is to be resent.
	// Owned by the Run goroutine.
	topics  map[string]bool
	started bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	up       atomic.Bool  // transitions under Bus.hmu
	lastData atomic.Int64 // unix nanos of the last reply read
	rebuild  atomic.Bool  // Redis dropped subscriptions we still want
}

// shardKey names the connection that carries app's topics: one per app on
// Redis Cluster, because go-redis binds a PubSub to the shard of its first
// channel and every topic of an app shares a slot; one for all on a single
// Redis.
func (r *runner) shardKey(app string) string {
	if r.b.cluster != nil {
		return app
	}
	return ""
}

func (r *runner) open(key string) *shard {
	// Neither call dials: the first subscribe (or ping) does.
	var ps *redis.PubSub
	if r.b.cluster != nil {
		ps = r.b.cluster.SSubscribe(context.Background())
	} else {
		ps = r.b.rdb.Subscribe(context.Background())
	}
	ctx, cancel := context.WithCancel(context.Background())
	sh := &shard{key: key, ps: ps, topics: make(map[string]bool), ctx: ctx, cancel: cancel}
	r.shards[key] = sh
	r.b.hmu.Lock()
	r.b.down++ // not up until its connection answers
	r.b.hmu.Unlock()
	return sh
}

// start runs sh's goroutines. On a cluster it must follow the shard's
// first SSUBSCRIBE: go-redis routes the dial by the first channel it knows,
// and a ping sent earlier would dial a random master.
func (r *runner) start(sh *shard) {
	sh.started = true
	sh.wg.Add(2)
	go r.receive(sh)
	go r.ping(sh)
	r.b.smu.Lock()
	r.b.started[sh.key] = sh
	r.b.smu.Unlock()
}

// close closes sh's connection. Closing one that was down restores
// nothing, so it never logs a restoration: with reopen (sh's topics go to
// a new connection) the outage lasts until that one answers; otherwise
// (its topics are no longer wanted, or Run ends) it ends quietly once no
// connection is down.
func (r *runner) close(sh *shard, reopen bool) {
	r.b.smu.Lock()
	if r.b.started[sh.key] == sh {
		delete(r.b.started, sh.key)
	}
	r.b.smu.Unlock()
	sh.cancel()
	_ = sh.ps.Close() // unblocks the receive loop's read
	sh.wg.Wait()
	delete(r.shards, sh.key)
	b := r.b
	b.hmu.Lock()
	defer b.hmu.Unlock()
	if !sh.up.Load() {
		b.down--
		if b.down == 0 && !reopen {
			b.outage = false
		}
	}
}

func (r *runner) closeAll() {
	for _, sh := range r.shards {
		r.close(sh, false)
	}
	r.b.m.subscribed.Set(0)
	r.b.hmu.Lock()
	r.b.live, r.b.down, r.b.outage = false, 0, false
	r.b.hmu.Unlock()
}

// change is what one reconcile asks of one shard.
type change struct{ add, remove []string }

// reconcile brings the subscriptions in line with the desired state and
// reports whether something failed and must be retried.
func (r *runner) reconcile(ctx context.Context) (failed bool) {
	b := r.b
	if r.rebuildShards() {
		failed = true
	}
	b.mu.Lock()
	if len(b.dirty) == 0 {
		b.mu.Unlock()
		return failed
	}
	dirty := b.dirty
	b.dirty = make(map[string]string)
	changes := make(map[string]*change)
	for topic, app := range dirty {
		key := r.shardKey(app)
		c := changes[key]
		if c == nil {
			c = &change{}
			changes[key] = c
		}
		if _, ok := b.want[topic]; ok {
			c.add = append(c.add, topic)
		} else {
			c.remove = append(c.remove, topic)
		}
	}
	b.mu.Unlock()

	var retry []string
	for key, c := range changes {
		retry = append(retry, r.apply(ctx, key, c)...)
	}
	if len(retry) > 0 {
		failed = true
		b.mu.Lock()
		for _, topic := range retry {
			if _, ok := b.dirty[topic]; !ok {
				b.dirty[topic] = dirty[topic]
			}
		}
		b.mu.Unlock()
	}
	n := 0
	for _, sh := range r.shards {
		n += len(sh.topics)
	}
	b.m.subscribed.Set(float64(n))
	return failed
}

// apply sends one shard's subscribes and unsubscribes and returns the
// topics whose subscribe failed.
func (r *runner) apply(ctx context.Context, key string, c *change) (failed []string) {
	b := r.b
	sh := r.shards[key]
	var add, remove []string
	for _, t := range c.add {
		if sh == nil || !sh.topics[t] {
			add = append(add, t)
		}
	}
	if sh != nil {
		for _, t := range c.remove {
			if _, ok := sh.topics[t]; ok {
				remove = append(remove, t)
				delete(sh.topics, t)
			}
		}
	}
	if sh == nil {
		if len(add) == 0 {
			return nil
		}
		sh = r.open(key)
	}
	if b.cluster != nil && len(sh.topics) == 0 && len(add) == 0 {
		// The app's last channel left this node: dropping the connection
		// unsubscribes it all and frees the connection.
		r.close(sh, false)
		return nil
	}
	for chunk := range slices.Chunk(remove, subscribeBatch) {
		var err error
		if b.cluster != nil {
			err = sh.ps.SUnsubscribe(ctx, chunk...)
		} else {
			err = sh.ps.Unsubscribe(ctx, chunk...)
		}
		// go-redis forgot the topics before sending, and a failed write
		// makes it redial and resubscribe without them; nothing to retry.
		// Meanwhile dispatch drops their messages.
		if err != nil && ctx.Err() == nil {
			b.log.Debug("unsubscribe failed; the reconnect drops it", "topics", len(chunk), "error", err)
		}
	}
	for chunk := range slices.Chunk(add, subscribeBatch) {
		var err error
		if b.cluster != nil {
			err = sh.ps.SSubscribe(ctx, chunk...)
		} else {
			err = sh.ps.Subscribe(ctx, chunk...)
		}
		// go-redis records the topics even when the write fails, so a
		// later redial resubscribes them; but a write that failed on a
		// connection that was then redialled at once left them out, so
		// failures are resent until one succeeds (SUBSCRIBE is idempotent).
		for _, t := range chunk {
			sh.topics[t] = err == nil
		}
		if err != nil {
			if ctx.Err() == nil {
				b.m.subscribeErrors.Inc()
				b.log.Debug("subscribe failed; retrying", "topics", len(chunk), "error", err)
			}
			failed = append(failed, chunk...)
		}
	}
	if !sh.started {
		r.start(sh)
	}
	return failed
}

// rebuildShards replaces the connections whose subscriptions Redis dropped
// on its own (a slot moved to another master, which unsubscribes its shard
// channels), and reports whether one is waiting for the rate limit.
func (r *runner) rebuildShards() (waiting bool) {
	b := r.b
	for _, sh := range r.shards {
		if !sh.rebuild.Load() {
			continue
		}
		if time.Since(r.lastRebuild) < rebuildEvery {
			return true
		}
		r.lastRebuild = time.Now()
		b.log.Info("redis dropped this node's subscriptions (slot moved?); resubscribing on the slot's new master", "app", sh.key)
		// The slot map is reloaded in the background; until it is, the new
		// SSUBSCRIBE may meet MOVED, which requests another rebuild.
		b.cluster.ReloadState(context.Background())
		r.close(sh, true)
		b.mu.Lock()
		for t := range sh.topics {
			b.dirty[t] = sh.key
		}
		b.mu.Unlock()
	}
	return false
}

// receive reads sh's connection until sh is closed: messages are
// dispatched, and errors mark the connection down until it answers again.
// go-redis redials and resubscribes by itself after a read error; a ping
// after each error drives that redial even when nothing else would.
func (r *runner) receive(sh *shard) {
	defer sh.wg.Done()
	b := r.b
	var (
		rctx    context.Context
		rcancel context.CancelFunc = func() {}
		until   time.Time
		backoff = minBackoff
		probe   = true
	)
	defer func() { rcancel() }()
	// A pong is due at most 2*pingEvery (plus a round trip) after the last
	// data, so this leaves a full pingEvery of slack. Without it a
	// half-open TCP connection would go unnoticed for minutes, since writes
	// into it succeed.
	deadAfter := 3 * b.pingEvery
	fail := func(err error) bool {
		if sh.ctx.Err() != nil {
			return false
		}
		var rerr redis.Error
		if errors.As(err, &rerr) && b.cluster != nil {
			// An error reply (MOVED to an SSUBSCRIBE after a slot moved):
			// the connection is fine, its subscriptions are not.
			sh.rebuild.Store(true)
			b.poke()
		}
		b.markDown(sh, err)
		probe = true
		if !clock.Sleep(sh.ctx, backoff) {
			return false
		}
		backoff = min(2*backoff, maxBackoff)
		return true
	}
	for {
		if probe {
			// Ping dials and resubscribes if there is no connection, and
			// its pong proves the connection even when no subscription
			// reply is due.
			if err := sh.ps.Ping(sh.ctx); err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			probe = false
		}
		// A read past the context's deadline makes go-redis drop the
		// connection as dead (a timeout argument would not). The ping loop
		// keeps a live connection talking well within deadAfter; the
		// context is renewed only now and then, not per message.
		if now := time.Now(); until.Sub(now) < deadAfter {
			until = now.Add(2 * deadAfter)
			ctx, cancel := context.WithDeadline(sh.ctx, until)
			rcancel()
			rctx, rcancel = ctx, cancel
		}
		msg, err := sh.ps.Receive(rctx)
		if err != nil {
			if !fail(err) {
				return
			}
			continue
		}
		backoff = minBackoff
		sh.lastData.Store(time.Now().UnixNano())
		if !sh.up.Load() && !sh.rebuild.Load() {
			// A shard waiting for a rebuild is down whatever it reads:
			// its subscriptions are gone.
			b.markUp(sh)
		}
		switch msg := msg.(type) {
		case *redis.Message:
			r.dispatch(msg)
		case *redis.Pong:
			b.synced(msg.Payload)
		case *redis.Subscription:
			if msg.Kind == "subscribe" || msg.Kind == "ssubscribe" {
				b.confirm(msg.Channel)
			}
			if msg.Kind == "sunsubscribe" && b.wanted(msg.Channel) {
				// Redis unsubscribed us by itself: the slot moved. (Our own
				// SUNSUBSCRIBE is for a channel no longer wanted, unless it
				// was joined again meanwhile; then the rebuild is merely
				// redundant.)
				sh.rebuild.Store(true)
				b.markDown(sh, fmt.Errorf("redis unsubscribed %s", msg.Channel))
				b.poke()
			}
		}
	}
}

// ping keeps sh's connection talking while no messages flow, so receive
// can tell a silent connection from a dead one.
func (r *runner) ping(sh *shard) {
	defer sh.wg.Done()
	every := r.b.pingEvery
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-sh.ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, sh.lastData.Load())) < every {
			continue
		}
		ctx, cancel := context.WithTimeout(sh.ctx, every)
		_ = sh.ps.Ping(ctx) // a failure shows up in receive
		cancel()
	}
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

func (r *runner) dispatch(msg *redis.Message) {
	b := r.b
	b.m.received.Inc()
	b.mu.RLock()
	in := b.want[msg.Channel]
	b.mu.RUnlock()
	if in == nil {
		// Left since; the unsubscribe is in flight or was just sent.
		b.m.unwanted.Inc()
		return
	}
	m, err := decode(msg.Payload)
	if err != nil {
		b.m.decodeErrors.Inc()
		if n, ok := b.decodeLog.Allow(time.Now()); ok {
			b.log.Error("dropping a message that does not decode", "app", in.app, "channel", in.channel,
				"bytes", len(msg.Payload), "error", err, "suppressed_since_last_log", n-1)
		}
		return
	}
	m.Channel = in.channel
	b.deliverMu.Lock()
	r.deliver(in.app, m)
	b.deliverMu.Unlock()
}

// markDown records that sh's connection failed. Only the first failure of
// an outage is logged, however many shards and retries it spans.
func (b *Bus) markDown(sh *shard, err error) {
	b.hmu.Lock()
	defer b.hmu.Unlock()
	if sh.up.Load() {
		sh.up.Store(false)
		b.down++
	}
	if !b.outage && b.live {
		b.outage, b.outageAt = true, time.Now()
		b.m.outages.Inc()
		b.log.Warn("redis pub/sub subscriptions lost; events published until they are restored do not reach this node", "error", err)
	}
}

func (b *Bus) markUp(sh *shard) {
	b.hmu.Lock()
	defer b.hmu.Unlock()
	if !sh.up.Load() {
		sh.up.Store(true)
		b.down--
		b.endOutageLocked()
	}
}

func (b *Bus) endOutageLocked() {
	if b.down == 0 && b.outage {
		b.outage = false
		b.log.Info("redis pub/sub subscriptions restored", "outage", time.Since(b.outageAt).Round(time.Millisecond))
	}
}
