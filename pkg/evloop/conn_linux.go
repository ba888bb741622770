package evloop

import (
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/headcount/headcount/pkg/lockorder"
)

var errEOF = io.EOF

// Conn is one accepted connection. Its methods may be called from any
// goroutine; a mutex orders writers, the loop and Close.
type Conn struct {
	mu      lockorder.Mutex[lockorder.Leaf]
	fd      int32
	gen     int32 // the slot's generation when this connection took it
	loop    *loop
	handler Handler
	// pending is output a write left: the callers' slices themselves
	// (re-sliced past what went out), never copies.
	pending      [][]byte
	pendingBytes int
	events       uint32 // the epoll mask registered now
	flags        uint32
}

const (
	flagClosed uint32 = 1 << iota
	flagRegistered
	flagPaused
	flagCloseAfterFlush
	flagShutdownAfterFlush
	flagUncounted
)

// readEvents is the mask of a connection that reads. Level-triggered: a
// read that leaves bytes in the kernel is reported again, so the loop
// reads once per event (fair between sockets), and ResumeRead needs no
// read of its own to find what arrived while paused.
const readEvents = unix.EPOLLIN | unix.EPOLLRDHUP

// maxIovecs bounds one writev (the kernel's IOV_MAX).
const maxIovecs = 1024

// event is c's epoll registration: its mask, its descriptor and its
// generation in the 64 bits of data the kernel hands back.
func (c *Conn) event() *unix.EpollEvent {
	return &unix.EpollEvent{Events: c.events, Fd: c.fd, Pad: c.gen}
}

// Fd is the connection's descriptor; once closed, it may be another's.
func (c *Conn) Fd() int { return int(c.fd) }

// SetHandler switches the connection's callbacks; the next event goes to h.
func (c *Conn) SetHandler(h Handler) {
	if h == nil {
		h = nopHandler{}
	}
	c.mu.Lock()
	c.handler = h
	c.mu.Unlock()
}

func (c *Conn) currentHandler() Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handler
}

// RemoteAddr is the peer's address (getpeername, asked each time), nil once
// closed.
func (c *Conn) RemoteAddr() net.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flags&flagClosed != 0 {
		return nil
	}
	sa, err := unix.Getpeername(int(c.fd))
	if err != nil {
		return nil
	}
	return sockaddrToTCP(sa)
}

// Write writes bufs in order with writev, now, without blocking. What the
// socket does not take is kept by reference (the slices must not be
// modified afterwards) and written by the loop when the socket is
// writable; done is false then, and OnDrained follows once it is all out.
// A Write while output is pending only appends. An error other than
// ErrClosed closes the connection (OnClose follows with it).
func (c *Conn) Write(bufs ...[]byte) (done bool, err error) {
	c.mu.Lock()
	if c.flags&(flagClosed|flagCloseAfterFlush) != 0 {
		c.mu.Unlock()
		return false, ErrClosed
	}
	if len(c.pending) > 0 {
		c.appendPending(bufs)
		c.mu.Unlock()
		return false, nil
	}
	c.appendPending(bufs)
	if err := c.writePending(); err != nil {
		c.closeLocked()
		c.mu.Unlock()
		// Unlocked: the loop takes c.mu to deliver OnClose.
		c.loop.enqueueClose(c, err)
		return false, err
	}
	done = len(c.pending) == 0
	if !done {
		c.loop.srv.eagain.Add(1)
		c.setEventsLocked(c.events | unix.EPOLLOUT)
	}
	c.mu.Unlock()
	return done, nil
}

func (c *Conn) appendPending(bufs [][]byte) {
	n := 0
	for _, b := range bufs {
		if len(b) > 0 {
			c.pending = append(c.pending, b)
			n += len(b)
		}
	}
	c.pendingBytes += n
	c.loop.srv.pending.Add(int64(n))
}

// writePending writes pending output until it is all out or the socket is
// full; it returns the socket's error, not EAGAIN.
func (c *Conn) writePending() error {
	for len(c.pending) > 0 {
		iovs := c.pending[:min(len(c.pending), maxIovecs)]
		n, err := rawWritev(c.fd, iovs)
		if n > 0 {
			c.consume(n)
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			return nil
		case errors.Is(err, unix.EINTR):
		default:
			return fmt.Errorf("evloop: write: %w", err)
		}
	}
	return nil
}

// consume drops n written bytes from the front of pending, releasing the
// references to slices written whole.
func (c *Conn) consume(n int) {
	c.pendingBytes -= n
	c.loop.srv.pending.Add(-int64(n))
	i := 0
	for ; i < len(c.pending) && n >= len(c.pending[i]); i++ {
		n -= len(c.pending[i])
		c.pending[i] = nil
	}
	if i == len(c.pending) {
		c.pending = c.pending[:0]
		if cap(c.pending) > 8 {
			c.pending = nil // an idle connection keeps no large array
		}
		return
	}
	c.pending[i] = c.pending[i][n:]
	// Re-slicing, not copying down: a long queue drained a little at a
	// time costs nothing per flush, and append moves only the live part
	// when it grows the array.
	c.pending = c.pending[i:]
}

// Pending is the number of bytes waiting to be written.
func (c *Conn) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingBytes
}

// PauseRead stops reading from the connection until ResumeRead; bytes
// arriving meanwhile wait in the kernel (and, once its buffer is full,
// the peer). A paused connection whose peer resets it is still closed.
func (c *Conn) PauseRead() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flags |= flagPaused
	c.setEventsLocked(c.events &^ readEvents)
}

// ResumeRead reads again; bytes that arrived while paused are reported at
// once.
func (c *Conn) ResumeRead() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flags &^= flagPaused
	c.setEventsLocked(c.events | readEvents)
}

// setEventsLocked changes the registered mask if it differs.
func (c *Conn) setEventsLocked(events uint32) {
	if events == c.events || c.flags&flagClosed != 0 {
		return
	}
	c.events = events
	if c.flags&flagRegistered != 0 {
		// Fails only if the descriptor is gone, which the closed flag rules out.
		_ = unix.EpollCtl(c.loop.epfd, unix.EPOLL_CTL_MOD, int(c.fd), c.event())
	}
}

// Close closes the connection now and drops pending output; OnClose(nil)
// follows on the loop. It is idempotent.
func (c *Conn) Close() {
	c.mu.Lock()
	if c.flags&flagClosed != 0 {
		c.mu.Unlock()
		return
	}
	c.closeLocked()
	c.mu.Unlock()
	c.loop.enqueueClose(c, nil)
}

// CloseAfterFlush closes the connection once its pending output is
// written (at once if there is none); Writes are refused from now on.
func (c *Conn) CloseAfterFlush() {
	c.mu.Lock()
	if c.flags&flagClosed != 0 {
		c.mu.Unlock()
		return
	}
	if len(c.pending) > 0 {
		c.flags |= flagCloseAfterFlush
		c.mu.Unlock()
		return
	}
	c.closeLocked()
	c.mu.Unlock()
	c.loop.enqueueClose(c, nil)
}

// CloseWrite half-closes the connection (shutdown SHUT_WR) once pending
// output is written; reads go on until the peer's EOF or Close.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flags&flagClosed != 0 {
		return ErrClosed
	}
	if len(c.pending) > 0 {
		c.flags |= flagShutdownAfterFlush
		return nil
	}
	return unix.Shutdown(int(c.fd), unix.SHUT_WR)
}

// Uncount takes c out of Stats().Conns now, as if it were closed, for a
// connection kept open only to finish (a refusal draining): a count of
// the connections a server holds then needs no bookkeeping of its own.
// Its close does not count it again.
func (c *Conn) Uncount() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flags&(flagClosed|flagUncounted) == 0 {
		c.flags |= flagUncounted
		c.loop.srv.conns.Add(-1)
	}
}

// closeLocked closes the descriptor and drops pending output; whoever
// calls it delivers OnClose, exactly once.
func (c *Conn) closeLocked() {
	c.flags |= flagClosed
	if c.flags&flagRegistered != 0 {
		// Closing alone would leave the registration while a forked child
		// still holds the descriptor.
		_ = unix.EpollCtl(c.loop.epfd, unix.EPOLL_CTL_DEL, int(c.fd), nil)
	}
	_ = unix.Close(int(c.fd))
	c.loop.srv.pending.Add(-int64(c.pendingBytes))
	if c.flags&flagUncounted == 0 {
		c.loop.srv.conns.Add(-1)
	}
	clear(c.pending)
	c.pending, c.pendingBytes = nil, 0
}
