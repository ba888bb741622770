package counts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/clock"
	"github.com/headcount/headcount/pkg/keyspace"
)

// Liveness channels let the cleaner see a process's death from Redis's side:
// a process holds a subscription to its own channel, and when it dies its
// connection closes and Redis drops the subscription at once, long before
// its heartbeat goes stale. Every liveness channel carries the same hash tag
// (keys.livenessTag), so on Redis Cluster they all live on one shard (as
// sharded channels) and one PUBSUB SHARDNUMSUB there checks every node.
// Nothing is ever published on them. A cleaner's own channel, its canary,
// tells it that the liveness shard has not lost its subscriptions
// (restart, failover, slot move), so a node's missing one means its
// connection closed.

// Liveness holds one subscription to a liveness channel, redialling and
// resubscribing with backoff when the connection drops. It is safe for
// concurrent use; one goroutine runs Run.
type Liveness struct {
	rdb     redis.UniversalClient
	channel string
	ping    time.Duration
	log     hclog.Logger
	// lost says, in the log line of a lost subscription, what that
	// costs: a node's and a cleaner's canary cost different things.
	lost string

	since atomic.Int64  // unix ns the current subscription was confirmed; 0: none
	ups   chan struct{} // one token after each confirmation, see Ups
}

// NewNodeLiveness returns the liveness subscription of node, pinged every
// ping (a connection silent for two pings is redialled).
func NewNodeLiveness(rdb redis.UniversalClient, ks keyspace.Space, node string, ping time.Duration, log hclog.Logger) *Liveness {
	l := newLiveness(rdb, keys{ks: ks}.nodeLivenessChannel(node), ping, log)
	l.lost = "the cleaner may reap this node meanwhile, and it then republishes"
	return l
}

// NewCanary returns a cleaner's own liveness subscription (see Store.Liveness).
func NewCanary(rdb redis.UniversalClient, ks keyspace.Space, id string, ping time.Duration, log hclog.Logger) *Liveness {
	l := newLiveness(rdb, keys{ks: ks}.canaryChannel(id), ping, log)
	l.lost = "until it is back, this cleaner reaps dead nodes only at --dead-after"
	return l
}

func newLiveness(rdb redis.UniversalClient, channel string, ping time.Duration, log hclog.Logger) *Liveness {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if ping <= 0 {
		ping = time.Second
	}
	return &Liveness{rdb: rdb, channel: channel, ping: ping, log: log.Named("liveness"), ups: make(chan struct{}, 1)}
}

// Ups receives after each confirmed subscription (tokens coalesce while
// nobody reads). It has one reader: the node's Recorder, which then records
// the confirmation with its node-level last-seen.
func (l *Liveness) Ups() <-chan struct{} { return l.ups }

// Since returns when the current subscription was confirmed by Redis, or the
// zero time while there is none.
func (l *Liveness) Since() time.Time {
	if ns := l.since.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Run holds the subscription until ctx ends.
//
// A connection that only went silent (no reply to two pings) is kept open
// until a new subscription is confirmed: while the node is cut off from
// Redis, closing it would tell Redis, wherever the close gets through
// first, that the process died, and the cleaner would reap a live node
// before dead-after. Cut off or hung, a node is the heartbeat's to judge.
func (l *Liveness) Run(ctx context.Context) {
	backoff := time.Duration(0)
	down := false
	var silent *redis.PubSub // the last confirmed connection that went silent
	closeSilent := func() {
		if silent != nil {
			_ = silent.Close()
			silent = nil
		}
	}
	defer closeSilent()
	for ctx.Err() == nil {
		keep, err := l.hold(ctx, func() {
			closeSilent()
			backoff = 0
			if down {
				l.log.Info("liveness subscription restored", "channel", l.channel)
			}
			down = false
		})
		l.since.Store(0)
		if keep != nil {
			closeSilent()
			silent = keep
		}
		if ctx.Err() != nil {
			return
		}
		if !down {
			l.log.Warn("liveness subscription lost; resubscribing ("+l.lost+")", "channel", l.channel, "error", err)
		}
		down = true
		if errors.Is(err, errSilent) {
			// Two pings' wait is backoff enough, and the attempt after a
			// partition heals must come at once: until it is confirmed,
			// Redis has no subscription of this node.
			backoff = 0
		}
		backoff = min(max(2*backoff, 20*time.Millisecond), 500*time.Millisecond)
		if !clock.Sleep(ctx, backoff) {
			return
		}
	}
}

// errSilent: the connection answered nothing for two pings.
var errSilent = errors.New("no reply to two pings")

// hold subscribes on a fresh connection and returns when it fails. It
// returns the connection open (keep) if it was confirmed and then went
// silent; it closes it otherwise.
func (l *Liveness) hold(ctx context.Context, up func()) (keep *redis.PubSub, err error) {
	var ps *redis.PubSub
	if cc, ok := l.rdb.(*redis.ClusterClient); ok {
		ps = cc.SSubscribe(ctx, l.channel)
	} else {
		ps = l.rdb.Subscribe(ctx, l.channel)
	}
	var closeOnce sync.Once
	closePS := func() { closeOnce.Do(func() { _ = ps.Close() }) }
	stop := context.AfterFunc(ctx, closePS) // unblocks a pending receive
	defer func() {
		stop()
		if keep == nil {
			closePS()
		}
	}()
	heard := time.Now()
	subscribed := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, l.ping)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			if time.Since(heard) > 2*l.ping {
				if subscribed && ctx.Err() == nil {
					return ps, errSilent
				}
				return nil, errSilent
			}
			if err := ps.Ping(ctx); err != nil {
				return nil, fmt.Errorf("ping: %w", err)
			}
			continue
		case err != nil:
			return nil, err
		}
		heard = time.Now()
		if s, ok := msg.(*redis.Subscription); ok {
			switch s.Kind {
			case "subscribe", "ssubscribe":
				if !subscribed {
					subscribed = true
					l.since.Store(time.Now().UnixNano())
					up()
					select {
					case l.ups <- struct{}{}:
					default:
					}
				}
			default:
				// Redis unsubscribed us: on Cluster, the slot moved.
				return nil, fmt.Errorf("redis sent %s", s.Kind)
			}
		}
	}
}

// Liveness reads, in one round trip to the liveness shard, which of nodes
// hold a liveness subscription (live) and which hold none (dead). canary is
// the caller's own Liveness (NewCanary): dead is only to be believed
// (trusted true) while the canary's subscription is confirmed, seen by
// Redis in the same read, and at least trustAfter old; otherwise the shard
// may have lost every subscription recently (restart, failover, slot move)
// while the nodes reconnect. live is true either way.
func (s *Store) Liveness(ctx context.Context, canary *Liveness, trustAfter time.Duration, nodes []string) (live, dead []string, trusted bool, err error) {
	since := canary.Since()
	chans := make([]string, 0, len(nodes)+1)
	chans = append(chans, canary.channel)
	for _, n := range nodes {
		chans = append(chans, s.nodeLivenessChannel(n))
	}
	var subs map[string]int64
	if cc, isCluster := s.rdb.(*redis.ClusterClient); isCluster {
		// PUBSUB SHARDNUMSUB answers for the shard it is sent to: send it to
		// the master of the liveness slot.
		m, merr := cc.MasterForKey(ctx, canary.channel)
		if merr != nil {
			return nil, nil, false, fmt.Errorf("find the liveness shard: %w", merr)
		}
		subs, err = m.PubSubShardNumSub(ctx, chans...).Result()
	} else {
		subs, err = s.rdb.PubSubNumSub(ctx, chans...).Result()
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read liveness subscriptions: %w", err)
	}
	for _, n := range nodes {
		if subs[s.nodeLivenessChannel(n)] > 0 {
			live = append(live, n)
		} else {
			dead = append(dead, n)
		}
	}
	trusted = !since.IsZero() && time.Since(since) >= trustAfter && subs[canary.channel] > 0 && canary.Since().Equal(since)
	return live, dead, trusted, nil
}

// Candidate is a node the liveness check should look at: its node-level
// last-seen (unix ms by the liveness shard's clock) is past the grace.
type Candidate struct {
	Node string
	Seen int64
	// Subscribed: the node recorded that its liveness subscription was
	// confirmed, so a missing one means it closed (not that the node never
	// held one).
	Subscribed bool
}

// LivenessCandidates returns, in one script on the liveness shard, up to
// limit nodes whose node-level last-seen is at least grace and at most
// window old, oldest first; it drops entries older than window on the
// way. Its cost is O(log nodes + nodes returned + entries dropped), whatever
// the number of apps. A node whose recorder writes no node-level entry (a
// build without it, or one whose entry was lost) is never returned.
func (s *Store) LivenessCandidates(ctx context.Context, grace, window time.Duration, limit int) ([]Candidate, error) {
	res, err := candidatesScript.Run(ctx, s.rdb, s.livenessKeys(), grace.Milliseconds(), window.Milliseconds(), limit).Slice()
	if err != nil {
		return nil, fmt.Errorf("find liveness candidates: %w", err)
	}
	out := make([]Candidate, 0, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		node, _ := res[i].(string)
		seen, _ := res[i+1].(string)
		ms, err := strconv.ParseFloat(seen, 64)
		if err != nil {
			return nil, fmt.Errorf("liveness candidate %q has last-seen %q: %w", node, seen, err)
		}
		sub, _ := res[i+2].(int64)
		out = append(out, Candidate{Node: node, Seen: int64(ms), Subscribed: sub == 1})
	}
	return out, nil
}

// AppsOf returns the apps in which node has a contribution: one ZSCORE per
// app, in one pipeline (one round trip per shard) with the SMEMBERS that
// lists the apps, asking the apps the store last listed; only apps new
// since cost a second round trip. It is O(apps), for a node found dead,
// never on every check: a reap's first script waits for it.
func (s *Store) AppsOf(ctx context.Context, node string) ([]string, error) {
	var known []string
	if p := s.appsSeen.Load(); p != nil {
		known = *p
	}
	var list *redis.StringSliceCmd
	scores, err := s.appScores(ctx, node, known, func(p redis.Pipeliner) { list = p.SMembers(ctx, s.appsKey()) })
	if err != nil {
		return nil, err
	}
	apps, err := list.Result()
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	s.appsSeen.Store(&apps)
	var fresh []string
	for _, app := range apps {
		if _, asked := scores[app]; !asked {
			fresh = append(fresh, app)
		}
	}
	if len(fresh) > 0 {
		more, err := s.appScores(ctx, node, fresh, nil)
		if err != nil {
			return nil, err
		}
		maps.Copy(scores, more)
	}
	var out []string
	for _, app := range apps {
		if scores[app] {
			out = append(out, app)
		}
	}
	return out, nil
}

// appScores asks, in one pipeline with whatever also queues, whether node
// is registered in each of apps.
func (s *Store) appScores(ctx context.Context, node string, apps []string, also func(redis.Pipeliner)) (map[string]bool, error) {
	cmds := make([]*redis.FloatCmd, len(apps))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if also != nil {
			also(p)
		}
		for i, app := range apps {
			cmds[i] = p.ZScore(ctx, s.nodesKey(app), node)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("find the apps of node %s: %w", node, err)
	}
	out := make(map[string]bool, len(apps))
	for i, app := range apps {
		switch err := cmds[i].Err(); {
		case err == nil:
			out[app] = true
		case errors.Is(err, redis.Nil):
			out[app] = false
		default:
			return nil, fmt.Errorf("find the apps of node %s: %w", node, err)
		}
	}
	return out, nil
}

// ForgetNode deletes node's node-level liveness entries (its address too) unless its
// last-seen there is no longer seen (the node wrote since): the cleaner
// calls it once it has reaped the node everywhere. It reports whether it
// deleted them.
func (s *Store) ForgetNode(ctx context.Context, node string, seen int64) (bool, error) {
	n, err := forgetScript.Run(ctx, s.rdb, s.livenessKeys(), node, seen).Int()
	if err != nil {
		return false, fmt.Errorf("forget node %s: %w", node, err)
	}
	return n == 1, nil
}

// WatchNode is a node the cleaner's watch may hold a connection to: one
// with a node-level last-seen, as LivenessCandidates returns, and the
// address its admin port serves GET /liveness on ("" for none).
type WatchNode struct {
	Candidate
	Address string
}

// WatchNodes returns, in one script on the liveness shard, up to limit
// nodes that have a node-level last-seen, with their addresses, deleting
// the addresses of nodes that have none any more. Its cost is O(nodes),
// whatever the number of apps or subscriptions.
func (s *Store) WatchNodes(ctx context.Context, limit int) ([]WatchNode, error) {
	res, err := watchNodesScript.Run(ctx, s.rdb, s.livenessKeys(), limit).Slice()
	if err != nil {
		return nil, fmt.Errorf("list the nodes to watch: %w", err)
	}
	out := make([]WatchNode, 0, len(res)/4)
	for i := 0; i+3 < len(res); i += 4 {
		node, _ := res[i].(string)
		seen, _ := res[i+1].(string)
		ms, err := strconv.ParseFloat(seen, 64)
		if err != nil {
			return nil, fmt.Errorf("node %q has last-seen %q: %w", node, seen, err)
		}
		sub, _ := res[i+2].(int64)
		addr, _ := res[i+3].(string)
		out = append(out, WatchNode{Candidate: Candidate{Node: node, Seen: int64(ms), Subscribed: sub == 1}, Address: addr})
	}
	return out, nil
}
