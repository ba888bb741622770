package wsnode

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
)

// How a node keeps its view of an app's occupied channels: read again
// after channelReadEvery, or at once when its share is spent. A read sees
// the node's own openings but those of the last flushMargin or so, more
// than a flush takes to land (a coalescing window of milliseconds and a
// round trip), which it carries as spent (channelView.pending).
const (
	channelReadEvery = time.Second
	flushMargin      = 100 * time.Millisecond
)

// appChannels caps each app's occupied channels cluster-wide
// (apps.App.ChannelLimit) without a Redis round trip per subscribe. A node
// opens a channel (its first subscriber cluster-wide, as far as the node
// can tell: the first on this node) only within its share of the room the
// app had at its last read, ⌈(limit - occupied) / nodes⌉ (the nodes that
// have written counts for the app, and itself), and reads again
// at most a second later, or sooner once the share is spent. The app
// overshoots its cap only by what other nodes opened within a flush of a
// read (milliseconds), at most a share each: one channel per node once the
// app is near its cap, and never more than the room itself (twice the cap,
// plus a channel per node, in all). While the share is spent, a subscribe
// to a channel nobody on this node is subscribed to costs a read of four
// O(1) commands, which tells whether another node has it occupied (then it
// is no new channel).
type appChannels struct {
	mu   lockorder.Mutex[lockorder.Leaf]
	apps map[string]*channelView
}

// channelView is one node's view of an app's occupied channels.
type channelView struct {
	mu     lockorder.Mutex[lockorder.Leaf]
	readAt time.Time
	// share is how many channels this node may open on the last read;
	// opened how many it has since (and the last flushMargin's before).
	share, opened int64
	// slot is the flushMargin-long slot of time of the latest opening;
	// inSlot and inPrev count the openings in it and in the slot before.
	slot           int64
	inSlot, inPrev int64
}

func (c *appChannels) view(app string) *channelView {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apps == nil {
		c.apps = map[string]*channelView{}
	}
	v := c.apps[app]
	if v == nil {
		v = &channelView{}
		c.apps[app] = v
	}
	return v
}

// open counts an opening at now.
func (v *channelView) open(now time.Time) {
	v.opened++
	switch slot := now.UnixMilli() / flushMargin.Milliseconds(); slot {
	case v.slot:
	case v.slot + 1:
		v.slot, v.inPrev, v.inSlot = slot, v.inSlot, 0
	default:
		v.slot, v.inPrev, v.inSlot = slot, 0, 0
	}
	v.inSlot++
}

// pending counts the openings of the last one to two flushMargins before
// now, which a read at now may not see yet.
func (v *channelView) pending(now time.Time) int64 {
	switch now.UnixMilli()/flushMargin.Milliseconds() - v.slot {
	case 0:
		return v.inSlot + v.inPrev
	case 1:
		return v.inSlot
	}
	return 0
}

// allowChannel refuses, as a subscription error, a subscribe of s that
// would open a channel past the app's maxChannels; nil lets it through.
// If Redis cannot be read the subscribe is let in, and the node does not
// read again for a second: refusing every new channel during a Redis blip
// would be worse, as for the connection limit.
func (s *socket) allowChannel(ch string) *protocol.SubscriptionError {
	a := s.node
	limit := int64(s.app.Load().ChannelLimit())
	if limit == 0 || !protocol.ChannelKind(ch).Counted() || a.index.has(chanKey{s.app.Load().ID, ch}) {
		return nil
	}
	v := a.channels.view(s.app.Load().ID)
	v.mu.Lock()
	now := time.Now()
	age := now.Sub(v.readAt)
	if age < channelReadEvery && v.opened < v.share {
		v.open(now)
		v.mu.Unlock()
		return nil
	}
	// This subscribe reads the app's channels afresh. Meanwhile the others
	// go on with the share as it is; those that have spent it read for
	// themselves (they must learn whether their channel is occupied
	// elsewhere), at the same time, not one after another.
	if age >= channelReadEvery {
		v.readAt = now
	}
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), a.tun.redisTimeout)
	load, err := a.store.ChannelLoad(ctx, s.app.Load().ID, a.cfg.NodeID, ch)
	cancel()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		a.log.Warn("cannot read the app's occupied channels; letting new channels in for a second", "app", s.app.Load().ID, "error", err)
		v.readAt, v.share, v.opened = time.Now(), math.MaxInt64, 0
		return nil
	}
	// The share is the room the read saw, this node's openings that it may
	// not have seen yet counted as spent.
	v.readAt, v.share, v.opened = now, 0, v.pending(time.Now())
	if room := limit - load.Channels; room > 0 {
		v.share = (room + load.Nodes - 1) / load.Nodes
	}
	a.log.Trace("read the app's occupied channels", "app", s.app.Load().ID, "channels", load.Channels, "limit", limit, "nodes", load.Nodes, "share", v.share, "pending", v.opened)
	if load.Occupied {
		return nil // occupied on another node: no new channel
	}
	if v.opened < v.share {
		v.open(time.Now())
		return nil
	}
	a.m.errors[reasonAppChannelLimit].Inc()
	return &protocol.SubscriptionError{Channel: ch, Type: protocol.SubscriptionLimit, Status: http.StatusForbidden,
		Message: "app " + s.app.Load().ID + " has " + strconv.FormatInt(load.Channels, 10) + " channels occupied, its limit (maxChannels) is " +
			strconv.FormatInt(limit, 10) + ": a channel nobody is subscribed to cannot be opened now"}
}
