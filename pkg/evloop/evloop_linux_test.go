package evloop

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestConnSize holds doc.go's "Conn (80 bytes)" (on 64-bit platforms):
// a change of the struct must change the claim too.
func TestConnSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the size is stated for 64-bit platforms")
	}
	require.Equal(t, uintptr(80), unsafe.Sizeof(Conn{}))
}

// TestEcho sends random streams in random pieces over many connections at
// once and expects each back whole and in order, with the loops parked in
// the runtime's poller (as they are) and blocked in epoll_wait (where the
// poller would refuse an epoll set).
func TestEcho(t *testing.T) {
	t.Run("poller", func(t *testing.T) {
		s := echoStreams(t)
		for _, l := range s.loops {
			require.NotNil(t, l.rc, "the epoll set is in the runtime's poller")
		}
	})
	t.Run("epoll_wait", func(t *testing.T) {
		testHookNoPoller = true
		t.Cleanup(func() { testHookNoPoller = false })
		s := echoStreams(t)
		for _, l := range s.loops {
			require.Nil(t, l.rc)
		}
	})
}

func echoStreams(t *testing.T) *Server {
	s := startServer(t, Options{Loops: 2, OnAccept: func(c *Conn) bool { c.SetHandler(echo{}); return true }})
	const conns = 40
	var wg sync.WaitGroup
	for i := range conns {
		c := dial(t, s)
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		want := make([]byte, 1+rng.IntN(512<<10))
		for j := range want {
			want[j] = byte(rng.Uint32())
		}
		wg.Go(func() {
			for rest := want; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(70<<10))
				if _, err := c.Write(rest[:n]); err != nil {
					t.Error(err)
					return
				}
				rest = rest[n:]
			}
		})
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(wait))
			got := make([]byte, len(want))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(got, want) {
				t.Errorf("conn %d: echo differs", i)
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	require.EqualValues(t, conns, st.Conns)
	require.EqualValues(t, conns, st.Accepted)
	require.Equal(t, 2, st.Loops)
	require.Positive(t, st.Events)
	return s
}

// TestSlowReader: a client that does not read makes output pend, kept as
// the very slices written (not copies), in order; once it reads, the loop
// writes the rest and calls OnDrained.
func TestSlowReader(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{Loops: 1, OnAccept: onAccept})
	client := dial(t, s)
	a := next(t, acc)

	frames := [2][]byte{bytes.Repeat([]byte{'a'}, 64<<10), bytes.Repeat([]byte{'b'}, 64<<10)}
	written := 0
	for i := 0; ; i++ {
		done, err := a.c.Write(frames[i%2])
		require.NoError(t, err)
		written++
		if !done {
			break
		}
		require.Less(t, i, 10000, "the socket never filled")
	}
	pendingAtFull := a.c.Pending()
	require.Positive(t, pendingAtFull)
	const more = 100
	for i := range more {
		done, err := a.c.Write(frames[(written+i)%2])
		require.NoError(t, err)
		require.False(t, done)
	}
	written += more
	require.Equal(t, pendingAtFull+more*(64<<10), a.c.Pending())
	require.EqualValues(t, a.c.Pending(), s.Stats().PendingBytes)
	require.Positive(t, s.Stats().EAGAINWrites)

	// Every pending slice is a frame itself (or the tail of one): no copy.
	a.c.mu.Lock()
	for i, p := range a.c.pending {
		f := frames[(written-len(a.c.pending)+i)%2]
		require.Same(t, &f[len(f)-len(p)], &p[0], "pending slice %d is not the frame's memory", i)
	}
	a.c.mu.Unlock()

	got := readFull(t, client, written*(64<<10))
	for i := range written {
		require.Equal(t, frames[i%2], got[i*(64<<10):(i+1)*(64<<10)], "frame %d", i)
	}
	require.Eventually(t, func() bool { _, d, _ := a.r.snapshot(); return d == 1 }, wait, tick)
	require.Zero(t, a.c.Pending())
	require.Zero(t, s.Stats().PendingBytes)
	done, err := a.c.Write([]byte("after"))
	require.NoError(t, err)
	require.True(t, done)
}

// TestCloseWhileWriting closes connections while other goroutines write to
// them and their output pends: OnClose comes once, writes then fail with
// ErrClosed, and no pending byte is left counted.
func TestCloseWhileWriting(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{Loops: 2, OnAccept: onAccept})
	frame := bytes.Repeat([]byte{'x'}, 8<<10)
	var wg sync.WaitGroup
	var recs []*recorder
	for range 20 {
		dial(t, s) // never reads
		a := next(t, acc)
		recs = append(recs, a.r)
		for range 4 {
			wg.Go(func() {
				for {
					if _, err := a.c.Write(frame, frame[:100]); err != nil {
						require.ErrorIs(t, err, ErrClosed)
						return
					}
				}
			})
		}
		wg.Go(func() {
			require.Eventually(t, func() bool { return a.c.Pending() > 0 }, wait, time.Millisecond)
			a.c.Close()
			a.c.Close()
		})
	}
	wg.Wait()
	for _, r := range recs {
		require.NoError(t, waitClosed(t, r))
	}
	for _, r := range recs {
		_, _, closes := r.snapshot()
		require.Len(t, closes, 1)
	}
	require.Zero(t, s.Stats().PendingBytes)
	require.Zero(t, s.Stats().Conns)
}

// TestPauseResume pauses reading at random points under load and resumes
// from another goroutine: every byte arrives, in order, and none while
// paused.
func TestPauseResume(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{Loops: 1, ReadBufferSize: 4096, OnAccept: onAccept})
	client := dial(t, s)
	a := next(t, acc)

	var paused atomic.Bool
	var pauses atomic.Int32
	resume := make(chan struct{}, 1)
	rng, pauseRng := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(8, 8))
	a.r.mu.Lock()
	a.r.onData = func(c *Conn, _ []byte) {
		if paused.Load() {
			t.Error("OnData while paused")
		}
		if rng.IntN(8) == 0 {
			paused.Store(true)
			pauses.Add(1)
			c.PauseRead()
			resume <- struct{}{}
		}
	}
	a.r.mu.Unlock()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-resume:
				time.Sleep(time.Duration(pauseRng.IntN(500)) * time.Microsecond) // let the kernel's buffer fill
				paused.Store(false)
				a.c.ResumeRead()
			case <-stop:
				return
			}
		}
	})
	defer wg.Wait()
	defer close(stop)

	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7 / 3)
	}
	_, err := client.Write(want)
	require.NoError(t, err)
	require.Eventually(t, func() bool { d, _, _ := a.r.snapshot(); return len(d) >= len(want) }, wait, tick)
	got, _, _ := a.r.snapshot()
	require.True(t, bytes.Equal(want, got), "bytes lost or reordered")
	require.Greater(t, pauses.Load(), int32(10))
}

// TestCloseAfterFlush: pending output leaves before the close, and Write
// is refused meanwhile.
func TestCloseAfterFlush(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{OnAccept: onAccept})
	client := dial(t, s)
	a := next(t, acc)
	big := bytes.Repeat([]byte{'z'}, 8<<20)
	done, err := a.c.Write(big, []byte("bye"))
	require.NoError(t, err)
	require.False(t, done)
	a.c.CloseAfterFlush()
	_, err = a.c.Write([]byte("late"))
	require.ErrorIs(t, err, ErrClosed)
	got := readFull(t, client, len(big)+3)
	require.Equal(t, "bye", string(got[len(big):]))
	_, err = client.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, waitClosed(t, a.r))
}

// TestCloseWrite half-closes: the peer reads EOF, and the connection still
// reads until the peer's own EOF.
func TestCloseWrite(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{OnAccept: onAccept})
	client := dial(t, s)
	a := next(t, acc)
	require.Equal(t, client.LocalAddr().String(), a.c.RemoteAddr().String())
	_, err := a.c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	require.NoError(t, err)
	require.NoError(t, a.c.CloseWrite())
	got, err := io.ReadAll(client)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 400 Bad Request\r\n\r\n", string(got))
	_, err = client.Write([]byte("more"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { d, _, _ := a.r.snapshot(); return string(d) == "more" }, wait, tick)
	require.NoError(t, client.CloseWrite())
	require.ErrorIs(t, waitClosed(t, a.r), io.EOF)
}

// TestServerClose closes every connection with ErrServerClosed.
func TestServerClose(t *testing.T) {
	onAccept, acc := accepting()
	s, err := Listen("127.0.0.1:0", Options{OnAccept: onAccept})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	var recs []*recorder
	for range 5 {
		c := dial(t, s)
		a := next(t, acc)
		require.NotNil(t, a.c.RemoteAddr())
		recs = append(recs, a.r)
		_, _ = c.Write([]byte("x"))
	}
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-served, ErrServerClosed)
	for _, r := range recs {
		require.ErrorIs(t, waitClosed(t, r), ErrServerClosed)
	}
	require.NoError(t, s.Close())
	require.Zero(t, s.Stats().Conns)
}

func TestListenBad(t *testing.T) {
	_, err := Listen("256.0.0.1:0", Options{})
	require.Error(t, err)
	s, err := Listen("127.0.0.1:0", Options{})
	require.NoError(t, err)
	_, err = Listen(s.Addr().String(), Options{})
	require.Error(t, err, "the port is taken")
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Serve(), ErrServerClosed)
}

// TestListenAnyAddress: an empty host takes IPv4 (and IPv6 where the
// kernel has it), and accepted sockets have TCP_NODELAY as Go's net sets.
func TestListenAnyAddress(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{OnAccept: onAccept})
	port := s.Addr().(*net.TCPAddr).Port
	s.Close()
	s2, err := Listen(":"+strconv.Itoa(port), Options{OnAccept: onAccept})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s2.Serve() }()
	defer func() { require.NoError(t, s2.Close()); require.ErrorIs(t, <-served, ErrServerClosed) }()
	c, err := net.DialTimeout("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), wait)
	require.NoError(t, err)
	defer c.Close()
	a := next(t, acc)
	require.Equal(t, c.LocalAddr().String(), a.c.RemoteAddr().String())
	nodelay, err := unix.GetsockoptInt(a.c.Fd(), unix.IPPROTO_TCP, unix.TCP_NODELAY)
	require.NoError(t, err)
	require.Equal(t, 1, nodelay)
}

// TestOnAccept: a refused connection is closed without OnClose; one written
// to from OnAccept, before it is registered with its loop, gets all its
// output even when most of it pends.
func TestOnAccept(t *testing.T) {
	frame := bytes.Repeat([]byte("hello "), 100_000)
	var n atomic.Int32
	rec := newRecorder()
	frames := make(chan int, 1)
	s := startServer(t, Options{OnAccept: func(c *Conn) bool {
		if n.Add(1) == 1 {
			return false
		}
		c.SetHandler(rec)
		for i := 1; i <= 1000; i++ {
			done, err := c.Write(frame)
			if err != nil || !done {
				if err != nil {
					t.Error(err)
				}
				frames <- i
				return true
			}
		}
		t.Error("the socket never filled")
		frames <- 0
		return true
	}})
	refused := dial(t, s)
	require.NoError(t, refused.SetReadDeadline(time.Now().Add(wait)))
	_, err := refused.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Eventually(t, func() bool { return s.Stats().Conns == 0 }, wait, tick)
	require.Zero(t, s.Stats().Accepted)

	client := dial(t, s)
	count := <-frames
	got := readFull(t, client, count*len(frame))
	require.Equal(t, bytes.Repeat(frame, count), got)
	require.Eventually(t, func() bool { _, d, _ := rec.snapshot(); return d == 1 }, wait, tick)
	_, _, closes := rec.snapshot()
	require.Empty(t, closes)
}

// TestPeerResetWhilePending: the peer resets a connection whose output
// pends; OnClose reports the reset and the pending bytes are released.
func TestPeerResetWhilePending(t *testing.T) {
	onAccept, acc := accepting()
	s := startServer(t, Options{OnAccept: onAccept})
	client := dial(t, s)
	a := next(t, acc)
	done, err := a.c.Write(make([]byte, 16<<20))
	require.NoError(t, err)
	require.False(t, done)
	require.NoError(t, client.SetLinger(0))
	require.NoError(t, client.Close())
	require.ErrorIs(t, waitClosed(t, a.r), unix.ECONNRESET)
	require.Zero(t, s.Stats().PendingBytes)
	_, err = a.c.Write([]byte("x"))
	require.ErrorIs(t, err, ErrClosed)
}

// TestCloseRacesServerClose: connections closed from other goroutines
// while the server closes get exactly one OnClose each.
func TestCloseRacesServerClose(t *testing.T) {
	for round := range 5 {
		onAccept, acc := accepting()
		s, err := Listen("127.0.0.1:0", Options{Loops: 2, OnAccept: onAccept})
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- s.Serve() }()
		var all []accepted
		for range 20 {
			dial(t, s)
			all = append(all, next(t, acc))
		}
		var wg sync.WaitGroup
		for i, a := range all {
			wg.Go(func() {
				if i%2 == 0 {
					a.c.Close()
				} else {
					_, _ = a.c.Write(make([]byte, 1<<20))
					a.c.CloseAfterFlush()
				}
			})
		}
		require.NoError(t, s.Close())
		wg.Wait()
		require.ErrorIs(t, <-served, ErrServerClosed)
		for _, a := range all {
			err := waitClosed(t, a.r)
			require.True(t, err == nil || errors.Is(err, ErrServerClosed), "%v", err)
			_, _, closes := a.r.snapshot()
			require.Len(t, closes, 1, "round %d", round)
		}
		require.Zero(t, s.Stats().Conns)
		require.Zero(t, s.Stats().PendingBytes)
	}
}

// TestStopAccepting: Serve returns, new connections are refused, and the
// connections there are go on being served until Close (a node draining
// its sockets keeps serving them).
func TestStopAccepting(t *testing.T) {
	s, err := Listen("127.0.0.1:0", Options{OnAccept: func(c *Conn) bool { c.SetHandler(echo{}); return true }})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	c := dial(t, s)
	_, err = c.Write([]byte("before"))
	require.NoError(t, err)
	require.Equal(t, "before", string(readFull(t, c, 6)))

	s.StopAccepting()
	require.NoError(t, <-served)
	_, err = net.DialTimeout("tcp", s.Addr().String(), wait)
	require.Error(t, err, "a connection after StopAccepting")
	_, err = c.Write([]byte("after"))
	require.NoError(t, err)
	require.Equal(t, "after", string(readFull(t, c, 5)), "an open connection is still served")

	require.NoError(t, s.Close())
	require.Zero(t, s.Stats().Conns)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err, "Close ends the connections")
}

// reentrant is the handler of two connections whose OnClose holds one
// mutex and, the first time, writes to the other connection under it, as
// wsnode's socket close delivers to other sockets under its link's lock.
type reentrant struct {
	mu     sync.Mutex
	conns  []*Conn
	wrote  bool
	closed chan *Conn
}

func (*reentrant) OnData(*Conn, []byte) {}
func (*reentrant) OnDrained(*Conn)      {}
func (h *reentrant) OnClose(c *Conn, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.wrote {
		h.wrote = true
		for _, o := range h.conns {
			if o != c {
				_, _ = o.Write([]byte("x")) // fails: its write side is shut
			}
		}
	}
	h.closed <- c
}

// TestServerCloseDeliversOnCloseOffTheCaller: a write that fails while
// Close shuts the loops down does not run OnClose inside the writer's
// call, where the writer may hold the lock OnClose takes: it used to,
// once the loop was marked stopped, and this deadlocked.
func TestServerCloseDeliversOnCloseOffTheCaller(t *testing.T) {
	h := &reentrant{closed: make(chan *Conn, 2)}
	onAccept, acc := accepting()
	s, err := Listen("127.0.0.1:0", Options{Loops: 1, OnAccept: onAccept})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	for range 2 {
		dial(t, s)
		a := next(t, acc)
		a.c.SetHandler(h)
		// A write now fails at once (EPIPE), without an event for the loop.
		require.NoError(t, unix.Shutdown(int(a.c.fd), unix.SHUT_WR))
		h.conns = append(h.conns, a.c)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("Close hung: a connection's OnClose ran inside another's")
	}
	require.ErrorIs(t, <-served, ErrServerClosed)
	require.Len(t, h.closed, 2)
}
