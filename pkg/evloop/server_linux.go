package evloop

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/headcount/headcount/pkg/portcap"
)

// Server accepts TCP connections and serves them on its loops.
type Server struct {
	opts  Options
	lfile *os.File // the listening socket, waited on by the runtime's poller
	addr  net.Addr
	loops []*loop
	table table

	mu      sync.Mutex
	serving bool
	closing bool
	done    chan struct{} // closed by Close: ends an accept backoff
	served  chan struct{} // closed when Serve has stopped every loop

	// stopAccepting is closed by StopAccepting (and Close): it ends an
	// accept backoff; accepted is closed when the accept loop returned.
	stopAccepting chan struct{}
	acceptDone    chan struct{}
	stopOnce      sync.Once
	loopsDone     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	conns        atomic.Int64
	accepted     atomic.Uint64
	acceptErrors atomic.Uint64
	eagain       atomic.Uint64
	pending      atomic.Int64
}

// Listen opens a non-blocking listening socket on addr (host:port; an
// empty host listens on every address) and the loops' epoll sets. Serve
// starts serving.
func Listen(addr string, opts Options) (*Server, error) {
	if opts.Loops <= 0 {
		opts.Loops = runtime.GOMAXPROCS(0)
	}
	if opts.ReadBufferSize <= 0 {
		opts.ReadBufferSize = DefaultReadBufferSize
	}
	if opts.OnAccept == nil {
		opts.OnAccept = func(*Conn) bool { return true }
	}
	fd, bound, err := listen(addr)
	if err != nil {
		return nil, fmt.Errorf("evloop: listen %s: %w", addr, err)
	}
	s := &Server{opts: opts, addr: bound, done: make(chan struct{}), served: make(chan struct{}),
		stopAccepting: make(chan struct{}), acceptDone: make(chan struct{})}
	// A non-blocking descriptor makes a pollable os.File: accept waits in
	// the runtime's poller, not on a thread of its own.
	s.lfile = os.NewFile(uintptr(fd), "evloop-listener")
	for range opts.Loops {
		l, err := newLoop(s)
		if err != nil {
			for _, l := range s.loops {
				l.closeFDs()
			}
			_ = s.lfile.Close()
			return nil, fmt.Errorf("evloop: epoll: %w", err)
		}
		s.loops = append(s.loops, l)
	}
	return s, nil
}

// listen makes the listening socket: SO_REUSEADDR, non-blocking,
// close-on-exec, the kernel's somaxconn as backlog. An empty host listens
// on every address, IPv6 and IPv4 in one socket where the kernel has IPv6
// (as Go's net does), else IPv4 only.
func listen(addr string) (int, net.Addr, error) {
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return -1, nil, err
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: tcp.Port}
		copy(sa.Addr[:], ip4)
		return listenOn(unix.AF_INET, sa, false)
	}
	sa := &unix.SockaddrInet6{Port: tcp.Port}
	if tcp.IP != nil {
		copy(sa.Addr[:], tcp.IP.To16())
		return listenOn(unix.AF_INET6, sa, false)
	}
	fd, bound, err := listenOn(unix.AF_INET6, sa, true)
	if errors.Is(err, unix.EAFNOSUPPORT) {
		return listenOn(unix.AF_INET, &unix.SockaddrInet4{Port: tcp.Port}, false)
	}
	return fd, bound, err
}

func listenOn(family int, sa unix.Sockaddr, dualStack bool) (int, net.Addr, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return -1, nil, err
	}
	// Accepted sockets inherit TCP_NODELAY from the listener, as Go's net
	// sets it on each: small frames leave at once.
	if err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if err == nil && dualStack {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err == nil {
		err = unix.Bind(fd, sa)
	}
	if err == nil {
		err = unix.Listen(fd, backlog())
	}
	var got unix.Sockaddr
	if err == nil {
		got, err = unix.Getsockname(fd)
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, nil, err
	}
	return fd, sockaddrToTCP(got), nil
}

// backlog is the kernel's cap on a listen backlog, or 4096 if unreadable.
func backlog() int {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return 4096
}

func sockaddrToTCP(sa unix.Sockaddr) net.Addr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: append(net.IP(nil), sa.Addr[:]...), Port: sa.Port}
	case *unix.SockaddrInet6:
		ip := append(net.IP(nil), sa.Addr[:]...)
		if ip4 := ip.To4(); ip4 != nil {
			ip = ip4 // an IPv4 peer of a dual-stack socket
		}
		return &net.TCPAddr{IP: ip, Port: sa.Port}
	}
	return nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.addr }

// Serve starts the loops and accepts connections until Close; it returns
// ErrServerClosed once Close stopped it, after every connection's OnClose.
func (s *Server) Serve() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.serving {
		s.mu.Unlock()
		return errors.New("evloop: Serve called twice")
	}
	s.serving = true
	s.mu.Unlock()
	for _, l := range s.loops {
		s.loopsDone.Go(l.run)
	}
	err := s.acceptLoop()
	close(s.acceptDone)
	if s.isClosing() {
		<-s.served
		return ErrServerClosed
	}
	// StopAccepting, or a listener error: the loops go on serving the
	// connections there are until Close.
	return err
}

// StopAccepting closes the listener: Serve returns, and the loops go on
// serving the connections there are until Close. It is idempotent.
func (s *Server) StopAccepting() {
	s.stopOnce.Do(func() {
		close(s.stopAccepting)
		s.closeErr = s.lfile.Close()
	})
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Close stops accepting, closes every connection (OnClose with
// ErrServerClosed), stops the loops and closes the listener and the epoll
// sets. It waits for Serve to finish; it is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		serving := s.serving
		s.mu.Unlock()
		close(s.done)
		s.StopAccepting()
		if serving {
			// No new connection can reach a loop now, so each loop
			// closes what it has and exits.
			<-s.acceptDone
			for _, l := range s.loops {
				l.stop()
			}
			s.loopsDone.Wait()
			for _, l := range s.loops {
				l.closeFDs()
			}
			close(s.served)
			return
		}
		for _, l := range s.loops {
			l.closeFDs()
		}
	})
	return s.closeErr
}

// acceptLoop accepts until the listener is closed. Each failed accept is
// reported and backed off (portcap.NextBackoff): a full descriptor table
// leaves the connection in the backlog, so trying again at once would spin.
func (s *Server) acceptLoop() error {
	rc, err := s.lfile.SyscallConn()
	if err != nil {
		return err
	}
	backoff := time.Duration(0)
	for {
		var acceptErr error
		err := rc.Read(func(lfd uintptr) bool {
			for {
				fd, _, err := unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
				switch {
				case err == nil:
					backoff = 0
					s.install(fd)
				case errors.Is(err, unix.EAGAIN):
					return false // wait in the poller
				case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
				default:
					acceptErr = err
					return true
				}
			}
		})
		if err != nil {
			return nil // the listener was closed
		}
		if acceptErr == nil {
			continue
		}
		backoff = portcap.NextBackoff(backoff)
		s.acceptErrors.Add(1)
		if s.opts.OnAcceptError != nil {
			s.opts.OnAcceptError(acceptErr, backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.stopAccepting:
			t.Stop()
			return nil
		}
	}
}

// install gives an accepted descriptor a Conn, offers it to OnAccept and
// registers it with its loop.
func (s *Server) install(fd int) {
	sl := s.table.slot(fd)
	if sl == nil {
		_ = unix.Close(fd) // past the table's reach
		return
	}
	sl.gen++ // only the accept goroutine writes gen
	l := s.loops[fd%len(s.loops)]
	c := &Conn{fd: int32(fd), //nolint:gosec // G115: fd < maxFD, checked by table.slot
		gen: sl.gen, loop: l, handler: nopHandler{}, events: readEvents}
	s.conns.Add(1)
	if !s.opts.OnAccept(c) {
		c.mu.Lock()
		if c.flags&flagClosed == 0 {
			c.closeLocked() // refused: no OnClose
		}
		c.mu.Unlock()
		return
	}
	s.accepted.Add(1)
	c.mu.Lock()
	if c.flags&flagClosed != 0 {
		c.mu.Unlock()
		return // OnAccept closed it; its OnClose is queued
	}
	sl.c.Store(c)
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, c.event()); err != nil {
		c.closeLocked()
		c.mu.Unlock()
		l.enqueueClose(c, fmt.Errorf("evloop: epoll add: %w", err))
		return
	}
	c.flags |= flagRegistered
	c.mu.Unlock()
}

// Stats reads the server's counters.
func (s *Server) Stats() Stats {
	st := Stats{
		Loops:        len(s.loops),
		Conns:        s.conns.Load(),
		Accepted:     s.accepted.Load(),
		AcceptErrors: s.acceptErrors.Load(),
		EAGAINWrites: s.eagain.Load(),
		PendingBytes: s.pending.Load(),
	}
	for _, l := range s.loops {
		st.Events += l.events.Load()
		st.StaleEvents += l.stale.Load()
	}
	return st
}

// table maps a descriptor to its connection: chunks of slots allocated as
// descriptors reach them, so a table costs what the highest descriptor
// needs, and a slot never moves (lookups take no lock).
type table struct {
	chunks [maxFD / chunkSize]atomic.Pointer[[chunkSize]slot]
	mu     sync.Mutex // serializes chunk allocation
}

const (
	chunkSize = 4096
	maxFD     = 1 << 24
)

// slot is one descriptor's entry. gen counts the connections that held the
// descriptor: every epoll event carries the generation it was registered
// with, and an event whose generation is not its connection's is stale.
type slot struct {
	c   atomic.Pointer[Conn]
	gen int32 // wraps: only equality matters
}

// slot returns fd's slot, allocating its chunk; nil if fd is out of reach.
func (t *table) slot(fd int) *slot {
	if fd < 0 || fd >= maxFD {
		return nil
	}
	p := &t.chunks[fd/chunkSize]
	ch := p.Load()
	if ch == nil {
		t.mu.Lock()
		if ch = p.Load(); ch == nil {
			ch = new([chunkSize]slot)
			p.Store(ch)
		}
		t.mu.Unlock()
	}
	return &ch[fd%chunkSize]
}

// lookup returns fd's connection, or nil.
func (t *table) lookup(fd int) *Conn {
	if fd < 0 || fd >= maxFD {
		return nil
	}
	ch := t.chunks[fd/chunkSize].Load()
	if ch == nil {
		return nil
	}
	return ch[fd%chunkSize].c.Load()
}

// release empties fd's slot if c still holds it.
func (t *table) release(c *Conn) {
	if ch := t.chunks[int(c.fd)/chunkSize].Load(); ch != nil {
		ch[int(c.fd)%chunkSize].c.CompareAndSwap(c, nil)
	}
}
