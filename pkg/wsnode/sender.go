package wsnode

import (
	"context"
	"fmt"
	"sync"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/lockorder"
	"github.com/headcount/headcount/pkg/protocol"
)

// Send queue limits per socket, for each of the queue's two kinds of
// frames. Deliveries (events the socket subscribed to) never wait: a
// socket whose deliveries would pass either limit is a slow consumer and
// is disconnected, since holding more would let one client that does not
// read pin unbounded memory. Replies to the socket's own frames
// (subscription_succeeded, errors, pongs) have the same budget of their
// own, and the socket's handler waits for room instead: a client's own
// burst (pusher-js sends every subscribe at once on connect) slows its
// reads down and never cuts it. A client that stops reading its replies
// leaves their write waiting on its own goroutine (finishBatch), and the
// sweeper's write timeout cuts it.
//
// The budget of deliveries holds a socket on every channel it may hold
// being sent one delivery per channel at once (subscription_count after
// pusher-js re-sends its subscribes), which a busy node queues before a
// writer runs: queueLimits grows it with the app's channel cap, from these
// floors, which fit the default cap. The byte budget is what bounds memory;
// frames only bound the queue's slice.
const (
	maxQueueFrames = 1024
	maxQueueBytes  = 256 << 10
	// deliveryOverhead is a subscription_count frame's bytes besides its
	// channel's name (106 with a count of seven digits), and some to spare.
	deliveryOverhead = 120
)

// queueLimits is the budget of deliveries a socket of app may have queued:
// the floors, or one subscription_count per channel of the app's cap on
// names of the longest length it allows, whichever is more (320,000 bytes
// with the defaults).
func queueLimits(app *apps.App) (frames, bytes int) {
	channels := app.ChannelsPerConnection()
	return max(maxQueueFrames, channels+maxQueueFrames-apps.DefaultMaxChannelsPerConnection),
		max(maxQueueBytes, channels*(app.ChannelNameLimit()+deliveryOverhead))
}

// closeSlots bounds the close handshakes in flight for sockets closed by
// the node (slow consumers, idle sockets); beyond it they are cut without one.
const closeSlots = 64

// sender is the fixed pool of writer goroutines. A socket with frames to
// send is on the ready list at most once (socket.scheduled); a writer takes
// a run of sockets off the list at once (popRun), writes each one's whole
// queue, and puts a socket back at the tail if more came meanwhile. A
// delivery puts its subscribers on the list in one go (pushAll): a burst
// to thousands of sockets costs the list's lock and a writer's wake-up a
// few times, not once per socket. A writer never waits for a client: a socket whose kernel
// buffer is full gets a goroutine of its own (finishBatch) until its
// batch is out or the sweeper's write timeout cuts it. So no socket has
// a goroutine for writing while it keeps up, and one that does not holds
// up neither a writer nor the publisher.
type sender struct {
	mu     lockorder.Mutex[lockorder.Leaf]
	cond   *sync.Cond
	ready  []*socket
	closed bool
	wg     sync.WaitGroup
}

func newSender() *sender {
	s := &sender{}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (q *sender) push(s *socket) {
	q.mu.Lock()
	q.ready = append(q.ready, s)
	q.mu.Unlock()
	q.cond.Signal()
}

// pushAll puts every socket of ss on the ready list, under one lock.
func (q *sender) pushAll(ss []*socket) {
	if len(ss) == 0 {
		return
	}
	q.mu.Lock()
	q.ready = append(q.ready, ss...)
	q.mu.Unlock()
	q.cond.Broadcast()
}

// runLength is the most sockets a writer takes off the ready list at once:
// enough that the list's lock is not taken per socket, few enough that
// the writers of a many-core node share a burst.
const runLength = 64

// popRun waits for ready sockets and moves up to runLength of them into
// run; it reports false once the sender is closed and the list is empty.
func (q *sender) popRun(run []*socket) ([]*socket, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 {
		if q.closed {
			return run, false
		}
		q.cond.Wait()
	}
	n := min(len(q.ready), runLength)
	run = append(run, q.ready[:n]...)
	clear(q.ready[:n])
	q.ready = q.ready[n:]
	if len(q.ready) == 0 {
		q.ready = nil // let the backing array go after a burst
	}
	return run, true
}

// start runs n writers.
func (q *sender) start(n int, write func(*socket)) {
	for range n {
		q.wg.Go(func() {
			run := make([]*socket, 0, runLength)
			for {
				var ok bool
				if run, ok = q.popRun(run[:0]); !ok {
					return
				}
				for i, s := range run {
					write(s)
					run[i] = nil // a closed socket is not held until the next run
				}
			}
		})
	}
}

// stop makes the writers finish the ready list and return, and waits.
func (q *sender) stop() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
	q.wg.Wait()
}

// enqueue queues a delivery for s without blocking. f is shared between
// sockets and must not be modified afterwards. It reports false if s is
// gone or was just found to be a slow consumer (then it is being closed).
func (s *socket) enqueue(f frame) bool {
	ok, wake := s.queueDelivery([]frame{f}, delivery{})
	if wake {
		s.node.send.push(s)
	}
	return ok
}

// delivery says what queueDelivery's frame is: an event on channel, one
// that supersedes a cached event not yet sent (cache, cache.go), and its
// serial in the channel's history, if it has one (replay.go).
type delivery struct {
	channel string
	cache   bool
	serial  string
}

// queueDelivery queues one[0] as enqueue does, except that it reports
// whether s must be put on the sender's ready list instead of putting it
// there, so that a delivery puts all its subscribers there at once. one
// holds just that frame and may be shared between sockets (push). It
// tells a subscribe of s to d's channel still waiting for its cached
// event that a live one came first (cache.go), and holds d while a replay
// of the channel's history is under way (replay.go), in the same lock as
// the queueing, so they agree on which frame is ahead.
func (s *socket) queueDelivery(one []frame, d delivery) (ok, wake bool) {
	f := one[0]
	s.mu.Lock()
	if w := s.pending; w != nil && d.cache && w.channel == d.channel {
		w.live = true
	}
	if s.dead {
		s.mu.Unlock()
		return false, false
	}
	holding, ok, wake := s.holdLocked(f, d.channel, d.serial)
	if holding || !ok {
		s.mu.Unlock()
		if !ok {
			s.slowConsumer()
		}
		return ok, false
	}
	if !s.fitsLocked(f) {
		s.mu.Unlock()
		s.slowConsumer()
		return false, false
	}
	wake = s.push(one) || wake
	s.markQueued(d.channel, d.serial)
	s.mu.Unlock()
	return true, wake
}

// queueReply queues a reply to s's own frame, waiting while s's replies
// fill their budget (see maxQueueFrames). Only s's handler calls it, so
// the wait holds back nothing but s's next read. f is not copied.
func (s *socket) queueReply(f frame) error { return s.queueReplyIf(f, nil, "", "") }

// queueReplyIf is queueReply, except that once there is room it asks
// keep, with s.mu held, whether f is still wanted; if not, f is dropped.
// A history event sent as a reply (replay.go) names its channel and
// serial.
func (s *socket) queueReplyIf(f frame, keep func() bool, ch, serial string) error {
	s.mu.Lock()
	for !s.dead && s.replies > 0 && (s.replies >= maxQueueFrames || s.replyBytes+len(f) > maxQueueBytes) {
		if s.room == nil {
			s.room = make(chan struct{})
		}
		room := s.room
		s.mu.Unlock()
		<-room
		s.mu.Lock()
	}
	if s.dead {
		s.mu.Unlock()
		return errSocketGone
	}
	if keep != nil && !keep() {
		s.mu.Unlock()
		return nil
	}
	s.replies++
	s.replyBytes += len(f)
	wake := s.push([]frame{f})
	s.markQueued(ch, serial)
	s.mu.Unlock()
	if wake {
		s.node.send.push(s)
	}
	return nil
}

// push appends one[0] to the queue (s.mu held) and reports whether s must
// be put on the sender's ready list. An empty queue becomes one itself: a
// delivery hands every subscriber the same one-frame slice, so that a
// burst to thousands of idle sockets allocates no queue for each. Its
// capacity is 1, so an append to it copies, and nobody writes to a batch
// taken from the queue (link.flush).
func (s *socket) push(one []frame) bool {
	f := one[0]
	if len(s.queue) == 0 {
		s.queue = one[:1:1]
	} else {
		s.queue = append(s.queue, f)
	}
	s.queued += len(f)
	wake := !s.scheduled
	s.scheduled = true
	return wake
}

// take empties the queue for a writer (s.mu held), making room for a
// waiting handler.
func (s *socket) take() []frame {
	batch := s.queue
	s.queue, s.queued, s.replies, s.replyBytes = nil, 0, 0, 0
	if s.room != nil {
		close(s.room)
		s.room = nil
	}
	return batch
}

// kill marks s dead and drops its queue (s.mu held): nothing more is
// queued or written, and a handler waiting for room returns.
func (s *socket) kill() {
	s.dead = true
	s.take()
}

// reply queues a payload built in a scratch buffer: it is framed in a
// copy, because the buffer is reused as soon as the handler returns.
// Replies share the queue with deliveries so the client sees them in the
// order they happened.
func (s *socket) reply(b []byte) error {
	return s.queueReply(frameOf(b))
}

// errSocketGone ends a handler whose socket was closed by a writer.
var errSocketGone = fmt.Errorf("socket closed: %w", context.Canceled)

// flush is a writer's turn on s: it writes everything queued, then
// either hands s back to the ready list or marks it idle. It never waits
// for a client (link.flush): what a full socket buffer does not take now
// is the link's to finish, and s's turn ends when it has.
func (s *socket) flush() {
	a := s.node
	s.mu.Lock()
	dead := s.dead
	batch := s.take()
	s.mu.Unlock()
	if !dead && len(batch) > 0 {
		a.m.batch.Observe(float64(len(batch)))
		sent, pending, err := s.link.flush(batch)
		a.m.sent.Add(float64(sent))
		if pending {
			a.m.waits.Inc()
			return
		}
		if err != nil {
			a.m.errors[reasonWrite].Inc()
			s.writeFailed()
		}
	}
	s.flushed()
}

// flushDone ends a turn on s whose frames the link finished later
// (link.flush).
func (s *socket) flushDone(sent int, err error) {
	a := s.node
	a.m.sent.Add(float64(sent))
	if err != nil {
		a.m.errors[reasonWrite].Inc()
		s.writeFailed()
	}
	s.flushed()
}

// writeFailed gives up on s after a failed write.
func (s *socket) writeFailed() {
	s.mu.Lock()
	s.kill()
	s.mu.Unlock()
	// Wakes the handler's read, which then cleans up.
	s.link.cut()
}

// flushed ends a writer's turn on s: s goes back to the ready list if more
// was queued meanwhile, else it is marked idle.
func (s *socket) flushed() {
	s.mu.Lock()
	again := len(s.queue) > 0 && !s.dead
	if !again {
		s.scheduled = false
	}
	s.mu.Unlock()
	if again {
		s.node.send.push(s) // to the tail: one busy socket does not starve others
	}
}

// slowConsumer disconnects s, whose queue overflowed. Close code 4100
// (over capacity) makes pusher-js back off a second before reconnecting
// instead of at once (42xx): a client that cannot keep up would otherwise
// come straight back into the same burst it just fell behind on.
//
// If a write to it is in progress right now, it is waiting for room in a
// full TCP buffer (writes that fit never wait): a close frame could not
// get through either, and cutting the connection ends the wait at once.
func (s *socket) slowConsumer() {
	a := s.node
	a.m.slow.Inc()
	a.log.Debug("disconnecting slow consumer", "socket_id", s.id)
	if s.writeSince.Load() != 0 {
		s.closing.Store(true)
		s.link.cut()
		return
	}
	s.closeAsync(protocol.CodeOverCapacity, "slow consumer: not reading fast enough")
}

// closeAsync closes s with code without waiting (whenSlot). The
// handler's read then fails and cleans up.
func (s *socket) closeAsync(code protocol.Code, reason string) {
	if !s.closing.CompareAndSwap(false, true) {
		return // a close is under way already (the sweeper sees it again)
	}
	s.whenSlot(func() { s.link.shut(code, reason) })
}

// whenSlot runs handshake, which closes s with a handshake, without
// waiting for it: at once where the link's close handshake does not wait (the event
// loop), else on a short-lived goroutine, bounded by closeSlots, because
// the handshake may wait seconds for a peer that does not read; beyond
// the bound, s is cut without one.
func (s *socket) whenSlot(handshake func()) {
	a := s.node
	if !s.link.shutWaits() {
		handshake()
		return
	}
	select {
	case a.closeSlots <- struct{}{}:
		go func() {
			defer func() { <-a.closeSlots }()
			handshake()
		}()
	default:
		s.link.cut()
	}
}
