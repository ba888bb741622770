package evloop

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestStaleEventSkipsReusedDescriptor forces the descriptor-reuse race: an
// event for connection A (its peer reset it: EPOLLERR|EPOLLHUP) is queued;
// before the loop dispatches it, A is closed and the next accept reuses
// A's descriptor for B. The stale event must be dropped, not close B.
func TestStaleEventSkipsReusedDescriptor(t *testing.T) {
	onAccept, acc := accepting()
	var (
		fdA, genA atomic.Int64
		fired     atomic.Bool
		b         atomic.Pointer[accepted]
		hookErr   atomic.Pointer[string]
	)
	fdA.Store(-1)
	clientB, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(clientB) })
	var a accepted
	var fillers []int
	t.Cleanup(func() {
		for _, fd := range fillers {
			_ = unix.Close(fd)
		}
	})
	var serverAddr *unix.SockaddrInet4

	testHookDispatch = func(_ *loop, events []unix.EpollEvent) {
		if fired.Load() {
			return
		}
		for _, ev := range events {
			if int64(ev.Fd) != fdA.Load() || int64(ev.Pad) != genA.Load() {
				continue
			}
			fired.Store(true)
			// A closes while its event waits; B takes its descriptor.
			a.c.Close()
			// Fill every free descriptor below A's (the kernel hands out
			// the lowest), so that the next accept gets A's.
			for {
				fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil || int64(fd) >= fdA.Load() {
					if err == nil {
						_ = unix.Close(fd)
					}
					break
				}
				fillers = append(fillers, fd)
			}
			if err := unix.Connect(clientB, serverAddr); err != nil {
				msg := err.Error()
				hookErr.Store(&msg)
				return
			}
			select {
			case got := <-acc:
				b.Store(&got)
			case <-time.After(wait):
				msg := "B not accepted"
				hookErr.Store(&msg)
			}
			return
		}
	}
	t.Cleanup(func() { testHookDispatch = nil }) // after the server's cleanup: the loop has exited

	s := startServer(t, Options{Loops: 1, OnAccept: onAccept})
	port := s.Addr().(*net.TCPAddr).Port
	serverAddr = &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	clientA := dial(t, s)
	a = next(t, acc)
	genA.Store(int64(a.c.gen))
	fdA.Store(int64(a.c.Fd()))

	// A's peer resets it: the loop wakes with A's event, and the hook runs.
	require.NoError(t, clientA.SetLinger(0))
	require.NoError(t, clientA.Close())
	require.Eventually(t, func() bool { return b.Load() != nil || hookErr.Load() != nil }, wait, tick)
	require.Nil(t, hookErr.Load())
	bc := b.Load()
	require.Equal(t, a.c.Fd(), bc.c.Fd(), "B did not reuse A's descriptor: the race was not forced")
	require.NotEqual(t, a.c.gen, bc.c.gen)
	require.NoError(t, waitClosed(t, a.r))

	// B still works: an echo through it, and no OnClose.
	bc.r.mu.Lock()
	bc.r.onData = func(c *Conn, b []byte) { _, _ = c.Write(append([]byte(nil), b...)) }
	bc.r.mu.Unlock()
	require.NoError(t, unix.SetsockoptTimeval(clientB, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10}))
	_, err = unix.Write(clientB, []byte("ping"))
	require.NoError(t, err)
	got := make([]byte, 4)
	n, err := unix.Read(clientB, got)
	require.NoError(t, err)
	require.Equal(t, "ping", string(got[:n]))
	_, _, closes := bc.r.snapshot()
	require.Empty(t, closes, "the stale event reached B")
	require.Positive(t, s.Stats().StaleEvents)
}
