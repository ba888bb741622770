package fanout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headcount/headcount/pkg/clock"
	"github.com/redis/go-redis/v9"
)

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
)

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

	// unsubscribing counts, by topic, the unsubscribes sent on this
	// connection and not answered yet. A subscribe's answer read while one
	// is pending answers a subscribe sent before it: an interest joined
	// since, whose own subscribe is still on its way, is not confirmed by
	// it (receive).
	umu           sync.Mutex
	unsubscribing map[string]int
}

// pendUnsubscribes adds d to each topic's count of unsubscribes under way.
func (sh *shard) pendUnsubscribes(topics []string, d int) {
	sh.umu.Lock()
	defer sh.umu.Unlock()
	for _, t := range topics {
		if n := sh.unsubscribing[t] + d; n > 0 {
			sh.unsubscribing[t] = n
		} else {
			delete(sh.unsubscribing, t)
		}
	}
}

// unsubscribePending reports whether an unsubscribe of topic sent on this
// connection is not answered yet.
func (sh *shard) unsubscribePending(topic string) bool {
	sh.umu.Lock()
	defer sh.umu.Unlock()
	return sh.unsubscribing[topic] > 0
}

// unsubscribeAnswered records the answer to an unsubscribe of topic and
// reports whether it answers one of ours (else Redis unsubscribed us).
func (sh *shard) unsubscribeAnswered(topic string) (ours bool) {
	ours = sh.unsubscribePending(topic)
	sh.pendUnsubscribes([]string{topic}, -1)
	return ours
}

// connectionLost forgets the unsubscribes under way: their answers will
// not come, and go-redis resubscribes on its new connection only what is
// still subscribed.
func (sh *shard) connectionLost() {
	sh.umu.Lock()
	defer sh.umu.Unlock()
	clear(sh.unsubscribing)
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
	sh := &shard{key: key, ps: ps, topics: make(map[string]bool), unsubscribing: make(map[string]int), ctx: ctx, cancel: cancel}
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
		// A topic subscribed already is sent again if its interest is not
		// confirmed: left and joined again before this reconcile, it is a
		// new interest whose WaitJoined waits for a confirmation that only
		// a SUBSCRIBE (idempotent in Redis) brings.
		if sh == nil || !sh.topics[t] || !b.isConfirmed(t) {
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
		// Counted before the write, so an answer read at once finds it.
		sh.pendUnsubscribes(chunk, 1)
		var err error
		if b.cluster != nil {
			err = sh.ps.SUnsubscribe(ctx, chunk...)
		} else {
			err = sh.ps.Unsubscribe(ctx, chunk...)
		}
		// go-redis forgot the topics before sending, and a failed write
		// makes it redial and resubscribe without them; nothing to retry.
		// Meanwhile dispatch drops their messages.
		if err != nil {
			sh.pendUnsubscribes(chunk, -1)
			if ctx.Err() == nil {
				b.log.Debug("unsubscribe failed; the reconnect drops it", "topics", len(chunk), "error", err)
			}
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
		sh.connectionLost()
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
			switch msg.Kind {
			case "subscribe", "ssubscribe":
				if !sh.unsubscribePending(msg.Channel) {
					b.confirm(msg.Channel)
				}
			case "unsubscribe", "sunsubscribe":
				ours := sh.unsubscribeAnswered(msg.Channel)
				if msg.Kind == "sunsubscribe" && !ours && b.wanted(msg.Channel) {
					// Redis unsubscribed us by itself: the slot moved.
					sh.rebuild.Store(true)
					b.markDown(sh, fmt.Errorf("redis unsubscribed %s", msg.Channel))
					b.poke()
				}
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
