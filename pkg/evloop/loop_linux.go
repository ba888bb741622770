package evloop

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/headcount/headcount/pkg/lockorder"
)

// loop is one epoll set and the goroutine that waits on it. Its
// connections' reads, flushes and callbacks all happen on that goroutine.
type loop struct {
	srv  *Server
	epfd int
	// ep is epfd as a file in the runtime's poller, and rc its raw access;
	// rc is nil where that failed, and the loop blocks in epoll_wait.
	ep   *os.File
	rc   syscall.RawConn
	wake int    // an eventfd: other goroutines wake the loop through it
	buf  []byte // the shared read buffer

	mu       lockorder.Mutex[lockorder.Leaf]
	closes   []closing // connections closed off the loop, awaiting OnClose
	stopping bool      // Serve asked the loop to stop
	stopped  bool      // the loop has exited: closes are delivered off it (enqueueClose)
	woken    atomic.Bool

	events atomic.Uint64
	stale  atomic.Uint64
}

type closing struct {
	c   *Conn
	err error
}

// testHookNoPoller, if set, keeps new loops out of the runtime's poller,
// as if it had refused their epoll sets.
var testHookNoPoller bool

// testHookDispatch, if set, runs on the loop between epoll_wait returning
// and the events being dispatched.
var testHookDispatch func(l *loop, events []unix.EpollEvent)

func newLoop(s *Server) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, err
	}
	l := &loop{srv: s, epfd: epfd, wake: wake}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil { //nolint:gosec // G115: descriptors fit in int32
		l.closeFDs()
		return nil, err
	}
	// An epoll set is itself pollable: readable while it holds events. In
	// non-blocking mode, os.NewFile registers it with the runtime's poller,
	// so the loop parks like any goroutine waiting for a socket instead of
	// holding a thread in epoll_wait, whose return must win a P back from
	// whoever took it meanwhile (the scheduler hands the P of a thread
	// blocked in a system call to others).
	if !testHookNoPoller && unix.SetNonblock(epfd, true) == nil {
		l.ep = os.NewFile(uintptr(epfd), "evloop-epoll")
		if rc, err := l.ep.SyscallConn(); err == nil {
			l.rc = rc
		}
	}
	return l, nil
}

func (l *loop) closeFDs() {
	_ = unix.Close(l.wake)
	if l.ep != nil {
		_ = l.ep.Close()
		return
	}
	_ = unix.Close(l.epfd)
}

// wait returns the next events, parked in the runtime's poller until
// there are some. The poller's registration is edge-triggered, so wait
// parks only once epoll_wait finds nothing: the connections' own
// registrations are level-triggered and report what is left each time.
func (l *loop) wait(events []unix.EpollEvent) (n int, err error) {
	if l.rc != nil {
		rerr := l.rc.Read(func(uintptr) bool {
			for {
				n, err = rawPoll(l.epfd, events)
				if !errors.Is(err, unix.EINTR) {
					return n > 0 || err != nil
				}
			}
		})
		if rerr == nil {
			return n, err
		}
		l.rc = nil // the poller refused the epoll set: block in epoll_wait from now on
	}
	return unix.EpollWait(l.epfd, events, -1)
}

// run waits for events and dispatches them until stop.
func (l *loop) run() {
	// The buffer is allocated here, so that a server never served costs none.
	l.buf = make([]byte, l.srv.opts.ReadBufferSize)
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := l.wait(events)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// EBADF/EINVAL: only a bug gets here; close everything rather than spin.
			l.shutdown()
			return
		}
		if hook := testHookDispatch; hook != nil {
			hook(l, events[:n])
		}
		l.events.Add(uint64(n)) //nolint:gosec // G115: n >= 0 without an error
		woken := false
		for _, ev := range events[:n] {
			if int(ev.Fd) == l.wake {
				woken = true
				continue
			}
			l.dispatch(ev)
		}
		if woken {
			var b [8]byte
			_, _ = unix.Read(l.wake, b[:])
			l.woken.Store(false) // before draining: a close queued from now on wakes again
			if l.drain() {
				l.shutdown()
				return
			}
		}
	}
}

// dispatch serves one event. The generation check is what keeps an event
// queued for a descriptor that was closed, and then reused by a new
// connection, from reaching the new one.
func (l *loop) dispatch(ev unix.EpollEvent) {
	c := l.srv.table.lookup(int(ev.Fd))
	if c == nil || c.gen != ev.Pad || c.loop != l {
		l.stale.Add(1)
		return
	}
	if ev.Events&unix.EPOLLOUT != 0 {
		l.flush(c)
	}
	if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		l.read(c, ev.Events)
	}
}

// read reads once from c (level-triggered: what is left is reported again)
// and hands the bytes to OnData.
func (l *loop) read(c *Conn, events uint32) {
	c.mu.Lock()
	if c.flags&flagClosed != 0 {
		c.mu.Unlock()
		l.stale.Add(1)
		return
	}
	var err error
	if c.flags&flagPaused == 0 {
		var n int
		n, err = rawRead(c.fd, l.buf)
		if n > 0 {
			h := c.handler
			c.mu.Unlock()
			h.OnData(c, l.buf[:n])
			return
		}
		if err == nil {
			err = errEOF
		}
	}
	if err == nil || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		// Nothing to read (or paused). EPOLLHUP and EPOLLERR are reported
		// whatever the mask, level-triggered: left alone they would spin.
		if events&(unix.EPOLLHUP|unix.EPOLLERR) == 0 {
			c.mu.Unlock()
			return
		}
		err = socketError(int(c.fd))
	}
	c.closeLocked()
	h := c.handler
	c.mu.Unlock()
	l.srv.table.release(c)
	h.OnClose(c, err)
}

// flush writes c's pending output; OnDrained when it is all out.
func (l *loop) flush(c *Conn) {
	c.mu.Lock()
	if c.flags&flagClosed != 0 || len(c.pending) == 0 {
		c.mu.Unlock()
		return
	}
	if err := c.writePending(); err != nil {
		c.closeLocked()
		h := c.handler
		c.mu.Unlock()
		l.srv.table.release(c)
		h.OnClose(c, err)
		return
	}
	if len(c.pending) > 0 {
		c.mu.Unlock()
		return
	}
	c.setEventsLocked(c.events &^ unix.EPOLLOUT)
	h := c.handler
	if c.flags&flagCloseAfterFlush != 0 {
		c.closeLocked()
		c.mu.Unlock()
		l.srv.table.release(c)
		h.OnClose(c, nil)
		return
	}
	if c.flags&flagShutdownAfterFlush != 0 {
		_ = unix.Shutdown(int(c.fd), unix.SHUT_WR)
	}
	c.mu.Unlock()
	h.OnDrained(c)
}

// enqueueClose hands a connection closed off the loop to the loop, which
// calls its OnClose. Once the loop has exited (a closer that raced its
// shutdown), a goroutine of its own does: never the caller, which may
// hold a lock OnClose takes.
func (l *loop) enqueueClose(c *Conn, err error) {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		go func() {
			l.srv.table.release(c)
			c.currentHandler().OnClose(c, err)
		}()
		return
	}
	l.closes = append(l.closes, closing{c, err})
	l.mu.Unlock()
	l.poke()
}

// poke wakes the loop, once per wake-up however many ask.
func (l *loop) poke() {
	if l.woken.CompareAndSwap(false, true) {
		one := [8]byte{1}
		_, _ = unix.Write(l.wake, one[:])
	}
}

func (l *loop) stop() {
	l.mu.Lock()
	l.stopping = true
	l.mu.Unlock()
	l.woken.Store(true)
	one := [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

// drain delivers queued closes; it reports whether the loop is to stop.
func (l *loop) drain() bool {
	l.mu.Lock()
	closes, stopping := l.closes, l.stopping
	l.closes = nil
	l.mu.Unlock()
	for _, cl := range closes {
		l.srv.table.release(cl.c)
		cl.c.currentHandler().OnClose(cl.c, cl.err)
	}
	return stopping
}

// shutdown closes every connection of this loop, then marks it stopped
// and delivers the closes queued meanwhile. Serve stops accepting before
// it stops the loops, so none is added after. Until every connection is
// closed, a close off the loop (a failed Write, Close) is queued as
// usual: delivered in the caller's call, its OnClose would run under
// whatever lock the caller holds, which OnClose may take again.
func (l *loop) shutdown() {
	t := &l.srv.table
	for i := range t.chunks {
		ch := t.chunks[i].Load()
		if ch == nil {
			continue
		}
		for j := range ch {
			c := ch[j].c.Load()
			if c == nil || c.loop != l {
				continue
			}
			c.mu.Lock()
			if c.flags&flagClosed != 0 {
				c.mu.Unlock()
				continue // closed off the loop: its close is queued
			}
			c.closeLocked()
			h := c.handler
			c.mu.Unlock()
			ch[j].c.CompareAndSwap(c, nil)
			h.OnClose(c, ErrServerClosed)
		}
	}
	l.mu.Lock()
	l.stopped = true
	closes := l.closes
	l.closes = nil
	l.mu.Unlock()
	for _, cl := range closes {
		l.srv.table.release(cl.c)
		cl.c.currentHandler().OnClose(cl.c, cl.err)
	}
}

// socketError is the socket's pending error (SO_ERROR), or EOF.
func socketError(fd int) error {
	if n, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && n != 0 {
		return unix.Errno(n)
	}
	return errEOF
}
