package wsnode

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/fanout"
)

// SetIdleTimeout shortens the idle timeout and the sweep period; call it
// before Run.
func (a *App) SetIdleTimeout(idle, sweep time.Duration) {
	a.tun.idleTimeout, a.tun.sweepEvery = idle, sweep
}

// SetCoalesce widens the window the node's recorder gathers changes in
// before it writes them (a slow flush); call it before Run. The rebuilt
// recorder's metrics go to a registry of their own.
func (a *App) SetCoalesce(d time.Duration) {
	a.tun.coalesce = d
	a.rec = a.newRecorder(prometheus.NewRegistry())
}

// Deliver hands m to the node as the event bus would: tests use it to flood
// a channel without going through Redis.
func (a *App) Deliver(app string, m fanout.Message) { a.route(app, m) }

// Publish publishes m on the node's event bus, as the HTTP API would.
func (a *App) Publish(ctx context.Context, app string, m fanout.Message) error {
	return a.bus.Publish(ctx, app, m)
}

// SetWriteTimeout shortens the write timeout and the sweep period; call it
// before Run.
func (a *App) SetWriteTimeout(write, sweep time.Duration) {
	a.tun.writeTimeout, a.tun.sweepEvery = write, sweep
}

// SetCloseTimeout shortens how long the event loop's close handshake
// waits for the client's close frame; call it before Run.
func (a *App) SetCloseTimeout(d time.Duration) { a.tun.closeTimeout = d }

// LiftFrameBudget lets every socket send any number of frames; call it
// before Run.
func (a *App) LiftFrameBudget() {
	a.tun.frameBudget = func(*apps.App) (int64, int64) { return 1 << 30, 1 << 30 }
}

// SetFrameBudget gives every socket a burst of frames and a rate per
// second after it; call it before Run.
func (a *App) SetFrameBudget(rate, burst int64) {
	a.tun.frameBudget = func(*apps.App) (int64, int64) { return rate, burst }
}

// Per-socket send queue budgets, which also bound the pongs owed.
const (
	MaxQueueFrames = maxQueueFrames
	MaxQueueBytes  = maxQueueBytes
)

// WritesWaiting counts the sockets with a write in progress, which for a
// client that stopped reading means waiting for room in its buffer.
func (a *App) WritesWaiting() int {
	n := 0
	for _, s := range a.hub.snapshot() {
		if s.writeSince.Load() != 0 {
			n++
		}
	}
	return n
}

// Redis is the client New built.
func (a *App) Redis() redis.UniversalClient { return a.rdb }

// ChannelReadEvery is how old a node's view of an app's occupied channels
// may be (appChannels).
const ChannelReadEvery = channelReadEvery

// Writers is the size of the node's writer pool.
func (a *App) Writers() int { return a.writers() }

// ResumeID is the resume id of the node's socket socketID (empty for none
// or no such socket).
func (a *App) ResumeID(socketID string) string {
	for _, s := range a.hub.snapshot() {
		if s.id == socketID && s.resume != nil {
			return s.resume.id
		}
	}
	return ""
}

// SetHoldLimit bounds the live deliveries a replay holds; call it before
// Run.
func (a *App) SetHoldLimit(n int) { a.tun.holdLimit = n }

// OnReplayRead runs f between each replay's read of the history and its
// sending; call it before Run.
func (a *App) OnReplayRead(f func(channel string)) { a.tun.replayRead = f }

// FreezeResumeState stops the node saving resume state, checkpoints and
// closes alike, as its crash would: what was saved stays the last
// checkpoint.
func (a *App) FreezeResumeState() { a.resumeFrozen.Store(true) }
