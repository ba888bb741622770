package wsnode

import (
	"encoding/json"
	"hash/maphash"

	"github.com/headcount/headcount/pkg/lockorder"
)

// chanKey names a channel of an app.
type chanKey struct{ app, channel string }

// presence is what the channel index keeps per subscribed socket: for
// presence channels the member it joined as, and what its
// subscription_succeeded listed; else zero.
type presence struct {
	user   string
	info   json.RawMessage
	listed *listed
}

// listed is what a presence subscriber's member list held, so deliver
// sends it only the member events that list did not: the list read from
// Redis holds every member edge up to its version, and the members this
// node added from its own sockets (not flushed yet) are pending, their
// member_added still to come.
type listed struct {
	version int64
	mu      lockorder.Mutex[lockorder.Leaf]
	pending map[string]bool
}

// news reports whether the member event of user (a join if added) at
// version v is news to the subscriber, and forgets a pending user it
// announces. Unversioned events (v 0) are news.
func (l *listed) news(user string, added bool, v int64) bool {
	if l == nil || v <= 0 {
		return true
	}
	if v <= l.version {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[user] {
		delete(l.pending, user)
		return !added
	}
	return true
}

const numChanShards = 64

type chanShard struct {
	mu   lockorder.RWMutex[rankIndex]
	subs map[chanKey]map[*socket]presence
	// versions holds the version of the last subscription count delivered
	// on each channel with local subscribers (see newer).
	versions map[chanKey]int64
}

// index maps each channel to this node's sockets subscribed to it, for
// delivery. It is sharded by channel so deliveries on different channels
// and (un)subscribes do not contend on one lock.
type index struct {
	seed   maphash.Seed
	shards [numChanShards]chanShard
}

func newIndex() *index {
	x := &index{seed: maphash.MakeSeed()}
	for i := range x.shards {
		x.shards[i].subs = map[chanKey]map[*socket]presence{}
		x.shards[i].versions = map[chanKey]int64{}
	}
	return x
}

func (x *index) shard(channel string) *chanShard {
	return &x.shards[maphash.String(x.seed, channel)%numChanShards]
}

func (x *index) add(k chanKey, s *socket, p presence) {
	sh := x.shard(k.channel)
	sh.mu.Lock()
	m := sh.subs[k]
	if m == nil {
		m = map[*socket]presence{}
		sh.subs[k] = m
	}
	m[s] = p
	sh.mu.Unlock()
}

func (x *index) remove(k chanKey, s *socket) {
	sh := x.shard(k.channel)
	sh.mu.Lock()
	if m := sh.subs[k]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(sh.subs, k)
			delete(sh.versions, k)
		}
	}
	sh.mu.Unlock()
}

// each calls fn for every local subscriber of k under the shard's read
// lock; fn must not block or touch the index.
func (x *index) each(k chanKey, fn func(*socket, presence)) {
	sh := x.shard(k.channel)
	sh.mu.RLock()
	for s, p := range sh.subs[k] {
		fn(s, p)
	}
	sh.mu.RUnlock()
}

// newer reports whether version v of a message that states k's count anew
// (fanout.Message.Version) is later than every one delivered on k so far,
// and records it if so. Counts of one channel are announced by whichever
// node changed it, each as its flush returns, so they can reach this node
// out of order; delivering an older one after a newer would leave the
// subscribers with a stale count until the next change. Unversioned
// messages (v 0) always pass. A channel with no local subscriber keeps no
// version: its next subscriber's own subscribe is announced after.
func (x *index) newer(k chanKey, v int64) bool {
	if v <= 0 {
		return true
	}
	sh := x.shard(k.channel)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.subs[k]; !ok {
		return true // nobody to deliver to
	}
	if v <= sh.versions[k] {
		return false
	}
	sh.versions[k] = v
	return true
}

// has reports whether k has a subscriber on this node.
func (x *index) has(k chanKey) bool {
	sh := x.shard(k.channel)
	sh.mu.RLock()
	_, ok := sh.subs[k]
	sh.mu.RUnlock()
	return ok
}
