package wsnode

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
)

const numShards = 64

type shard struct {
	mu      lockorder.RWMutex[lockorder.Leaf]
	sockets map[*socket]struct{}
}

// hub is the node's socket registry. Sockets are spread over shards so
// connects and disconnects on many cores do not contend on one lock.
type hub struct {
	shards [numShards]shard
	next   atomic.Uint32

	// now is a coarse clock (unix ms) the sweeper advances, so the frame
	// path stamps activity with one atomic load instead of reading the time.
	now atomic.Int64

	// mu orders enter against close so handlers.Add never races Wait.
	mu       lockorder.Mutex[lockorder.Leaf]
	closed   bool
	handlers sync.WaitGroup
	closing  atomic.Bool
}

func newHub() *hub {
	h := &hub{}
	for i := range h.shards {
		h.shards[i].sockets = map[*socket]struct{}{}
	}
	h.now.Store(time.Now().UnixMilli())
	return h
}

// enter registers a handler; it reports false once the hub is closed.
func (h *hub) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.handlers.Add(1)
	return true
}

func (h *hub) leave() { h.handlers.Done() }

// handOff takes one more slot for a goroutine the caller starts while it
// still holds its own, so the drain's Wait cannot have returned yet.
func (h *hub) handOff() { h.handlers.Add(1) }

// close stops new handlers and new sockets.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.closing.Store(true)
}

// add registers s; it reports false if the hub is draining, in which case
// the caller closes s itself (the drain's snapshot may not include it).
func (h *hub) add(s *socket) bool {
	s.shard = h.next.Add(1) % numShards
	s.lastSeen.Store(h.now.Load())
	sh := &h.shards[s.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Checked under the shard lock: drain sets closing before it takes the
	// shard locks to snapshot, so s is either refused here or snapshotted.
	if h.closing.Load() {
		return false
	}
	sh.sockets[s] = struct{}{}
	return true
}

func (h *hub) remove(s *socket) {
	sh := &h.shards[s.shard]
	sh.mu.Lock()
	delete(sh.sockets, s)
	sh.mu.Unlock()
}

func (h *hub) snapshot() []*socket {
	var out []*socket
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		for s := range sh.sockets {
			out = append(out, s)
		}
		sh.mu.RUnlock()
	}
	return out
}

func (h *hub) len() int {
	n := 0
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		n += len(sh.sockets)
		sh.mu.RUnlock()
	}
	return n
}

// sweep advances the hub clock and hands onClose the sockets that are
// silent past idle or stuck in a write past writeTimeout, every interval
// until ctx ends; onClose closes them.
// It replaces per-socket timers: one goroutine and one ticker for the node.
func (h *hub) sweep(ctx context.Context, interval, idle, writeTimeout time.Duration, onClose func(s *socket, reason reason)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var victims []*socket
	var reasons []reason
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ms := now.UnixMilli()
			h.now.Store(ms)
			victims, reasons = victims[:0], reasons[:0]
			for i := range h.shards {
				sh := &h.shards[i]
				sh.mu.RLock()
				for s := range sh.sockets {
					if w := s.writeSince.Load(); w != 0 && ms-w > writeTimeout.Milliseconds() {
						victims, reasons = append(victims, s), append(reasons, reasonWriteTimeout)
					} else if ms-s.lastSeen.Load() > idle.Milliseconds() {
						victims, reasons = append(victims, s), append(reasons, reasonIdle)
					} else if by := s.authBy.Load(); by != 0 && ms >= by {
						victims, reasons = append(victims, s), append(reasons, reasonNotAuthorized)
					}
				}
				sh.mu.RUnlock()
			}
			for i, s := range victims {
				onClose(s, reasons[i])
			}
			clear(victims) // do not pin closed sockets until the next sweep
		}
	}
}

// drain closes every socket with code 4200, spread over window in random
// order with at most concurrency close handshakes at a time, then waits for
// every handler to finish (so every decrement is recorded). Sockets still
// open grace after the window are closed without a handshake.
func (h *hub) drain(window, grace time.Duration, concurrency int, onForced func(n int)) {
	h.close()
	socks := h.snapshot()
	// Random order: clients of one app or region do not all reconnect together.
	rand.Shuffle(len(socks), func(i, j int) { socks[i], socks[j] = socks[j], socks[i] })

	done := make(chan struct{})
	go func() { h.handlers.Wait(); close(done) }()

	sem := make(chan struct{}, concurrency)
	start := time.Now()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var closers sync.WaitGroup
	for i, s := range socks {
		due := start.Add(window * time.Duration(i) / time.Duration(len(socks)))
		// Sleeping only for gaps above a millisecond batches closes when
		// there are many sockets instead of arming a timer per socket.
		if d := time.Until(due); d > time.Millisecond {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-done:
			}
		}
		sem <- struct{}{}
		if !s.link.shutWaits() {
			<-sem
			s.link.shut(protocol.CodeReconnect, "server shutting down")
			continue
		}
		closers.Go(func() {
			defer func() { <-sem }()
			s.link.shut(protocol.CodeReconnect, "server shutting down")
		})
	}

	deadline := time.NewTimer(time.Until(start.Add(window + grace)))
	defer deadline.Stop()
	select {
	case <-done:
	case <-deadline.C:
		rest := h.snapshot()
		onForced(len(rest))
		for _, s := range rest {
			s.link.cut()
		}
		<-done
	}
	closers.Wait()
}
