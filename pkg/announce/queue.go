package announce

import (
	"context"
	"time"

	"github.com/headcount/headcount/pkg/counts"
)

// trailingEvery is how often Run sends the throttle's held-back counts.
const trailingEvery = time.Second

// Flushed queues what e causes for Run to announce, and returns at once:
// a slow bus never holds up the caller (a wsnode's Recorder, whose
// OnFlushed it is, or a cleaner's reap). Edges that cause nothing are
// dropped here. Each edge reaches Flushed once, from the process whose
// unit made it, so each is announced once; every node then delivers it to
// its own subscribers.
func (a *Announcer) Flushed(e counts.Edges) {
	if !a.wants(e) {
		return
	}
	a.qmu.Lock()
	a.queue = append(a.queue, e)
	a.qmu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run announces what Flushed queues, in its order (what queued while an
// announcement ran goes out as one batch), and with Throttle the
// held-back counts that are due, about every second, until ctx ends. Run
// it on one goroutine; Drain sends what is left after it returns.
func (a *Announcer) Run(ctx context.Context) {
	t := time.NewTicker(trailingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
			a.Drain(ctx)
		case now := <-t.C:
			a.pubMu.Lock()
			a.trailing(ctx, now)
			a.pubMu.Unlock()
		}
	}
}

// Drain announces at once everything queued so far: Run's batches, and a
// stopping process's last edges (its final flush's leaves) after Run
// returned.
func (a *Announcer) Drain(ctx context.Context) {
	a.pubMu.Lock()
	defer a.pubMu.Unlock()
	a.qmu.Lock()
	q := a.queue
	a.queue = nil
	a.qmu.Unlock()
	if len(q) > 0 {
		a.announce(ctx, q...)
	}
}
