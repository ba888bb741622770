package wsnode

import (
	"encoding/json"
	"hash/maphash"
	"sync"
)

// chanKey names a channel of an app.
type chanKey struct{ app, channel string }

// presence is what the channel index keeps per subscribed socket: for
// presence channels the member it joined as, else zero.
type presence struct {
	user string
	info json.RawMessage
}

const numChanShards = 64

type chanShard struct {
	mu   sync.RWMutex
	subs map[chanKey]map[*socket]presence
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
