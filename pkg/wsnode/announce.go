package wsnode

import (
	"context"
	"sync"
	"time"

	"github.com/headcount/headcount/pkg/counts"
)

// announcer hands what the recorder's flushes changed cluster-wide to the
// node's announce.Announcer, which publishes it through the bus: presence
// joins and leaves (the 0->1 and 1->0 edges of a user's sockets anywhere
// in the cluster) and subscription counts. The recorder reports each edge
// once, from the node whose flush caused it, so each is announced once;
// every node then delivers it to its own subscribers. Announcing runs on
// the announcer's goroutine, so a slow Redis never holds up the recorder's
// flushes; what queued meanwhile goes out as one batch.
type announcer struct {
	a    *App
	mu   sync.Mutex
	q    []counts.Edges
	wake chan struct{}

	// pubMu serializes announcing (the announcer goroutine, and the final
	// publishPending at shutdown), so counts go out in order.
	pubMu sync.Mutex
}

func newAnnouncer(a *App) *announcer {
	return &announcer{a: a, wake: make(chan struct{}, 1)}
}

// flushed is the recorder's OnFlushed: it only queues.
func (n *announcer) flushed(e counts.Edges) {
	if !n.a.announce.Wants(e) {
		return
	}
	n.mu.Lock()
	n.q = append(n.q, e)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *announcer) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
			n.publishPending(ctx)
		case now := <-t.C:
			n.trailing(ctx, now)
		}
	}
}

// publishPending announces everything queued so far.
func (n *announcer) publishPending(ctx context.Context) {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	n.mu.Lock()
	q := n.q
	n.q = nil
	n.mu.Unlock()
	n.a.announce.Announce(ctx, q...)
}

// trailing sends the busy channels' held-back counts that are due.
func (n *announcer) trailing(ctx context.Context, now time.Time) {
	n.pubMu.Lock()
	defer n.pubMu.Unlock()
	n.a.announce.Trailing(ctx, now)
}
