package evloop

import (
	"errors"
	"net"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestFrameIOStaysInGo: the loop's reads and a Write's writev are raw
// system calls (rawsys_linux.go), so a goroutine making them never shows
// in a system call to the scheduler. Go's runtime counts the goroutines
// in one (/sched/goroutines/not-in-go); a goroutine samples it while
// 5,000 frames go out and 500 come in. The test's own end of the
// connection uses raw calls too, and it runs alone (not parallel), so
// nothing else is counted. Through unix.Syscall, about 70% of the samples
// taken during the writes count one, and 0.5-0.7% of those during the
// reads (which mostly wait for the next frame); raw, none.
func TestFrameIOStaysInGo(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("the sampler needs a P of its own beside the loop's")
	}
	const frames, size = 5000, 64
	onAccept, ch := accepting()
	s := startServer(t, Options{OnAccept: onAccept})
	client := dial(t, s)
	a := next(t, ch)
	frame := make([]byte, size)

	samples, in := inSyscalls(t, func() {
		for range frames / 100 {
			for range 100 {
				done, err := a.c.Write(frame)
				require.NoError(t, err)
				require.True(t, done, "a frame did not fit the socket: the test would count EPOLLOUT's epoll_ctl")
			}
			rawReadFull(t, client, 100*size)
		}
	})
	t.Logf("writes: %d of %d samples saw a goroutine in a system call", in, samples)
	require.Greater(t, samples, 1000, "too few samples to tell")
	require.LessOrEqual(t, in, samples/1000, "Write's writev is a system call the scheduler sees")

	samples, in = inSyscalls(t, func() {
		for i := range frames / 10 {
			rawWriteAll(t, client, frame)
			deadline := time.Now().Add(wait)
			for data, _, _ := a.r.snapshot(); len(data) < (i+1)*size; data, _, _ = a.r.snapshot() {
				require.True(t, time.Now().Before(deadline), "frame %d not read", i)
				runtime.Gosched()
			}
		}
	})
	t.Logf("reads: %d of %d samples saw a goroutine in a system call", in, samples)
	require.Greater(t, samples, 1000, "too few samples to tell")
	require.LessOrEqual(t, in, samples/1000, "the loop's read or epoll_wait is a system call the scheduler sees")
}

// inSyscalls runs f while a goroutine samples how many goroutines are in
// a system call, and returns how many samples it took and how many saw one.
// It starts f once 1,000 samples in a row saw none: the server's accept
// goroutine, for one, makes its last accept4 after handing a connection over.
func inSyscalls(t *testing.T, f func()) (samples, in int) {
	t.Helper()
	sample := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
	deadline := time.Now().Add(wait)
	for quiet := 0; quiet < 1000; quiet++ {
		if metrics.Read(sample); sample[0].Value.Uint64() > 0 {
			require.True(t, time.Now().Before(deadline), "a goroutine stays in a system call")
			quiet = 0
			runtime.Gosched()
		}
	}
	stop, started, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for ; ; samples++ {
			select {
			case <-stop:
				return
			default:
			}
			metrics.Read(sample)
			if sample[0].Value.Uint64() > 0 {
				in++
			}
			if samples == 0 {
				close(started)
			}
		}
	}()
	<-started
	stopSampling := sync.OnceFunc(func() { close(stop); <-done })
	defer stopSampling() // f may end the test
	f()
	stopSampling()
	return samples, in
}

// rawReadFull reads n bytes from c with the package's raw read.
func rawReadFull(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	b := make([]byte, n)
	deadline, got := time.Now().Add(wait), 0
	require.NoError(t, rc.Control(func(fd uintptr) {
		for got < n && time.Now().Before(deadline) {
			m, err := rawRead(int32(fd), b[got:]) //nolint:gosec // G115: descriptors fit in int32
			switch {
			case err == nil && m == 0:
				t.Error("the server closed the connection")
				return
			case err == nil:
				got += m
			case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
				t.Error(err)
				return
			default:
				runtime.Gosched()
			}
		}
	}))
	require.Equal(t, n, got, "bytes read within %v", wait)
}

// rawWriteAll writes b to c with the package's raw writev.
func rawWriteAll(t *testing.T, c *net.TCPConn, b []byte) {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) {
		for len(b) > 0 {
			m, err := rawWritev(int32(fd), [][]byte{b}) //nolint:gosec // G115: descriptors fit in int32
			switch {
			case err == nil:
				b = b[m:]
			case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR):
				t.Error(err)
				return
			default:
				runtime.Gosched()
			}
		}
	}))
}
