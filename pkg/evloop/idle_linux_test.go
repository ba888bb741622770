package evloop

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestIdleClientsHelper is not a test: BenchmarkIdleConns runs the test
// binary as a child process holding the client sockets, so that the
// benchmark's process holds only the server's side.
func TestIdleClientsHelper(t *testing.T) {
	addr := os.Getenv("EVLOOP_IDLE_ADDR")
	if addr == "" {
		t.Skip("the client side of BenchmarkIdleConns")
	}
	n, err := strconv.Atoi(os.Getenv("EVLOOP_IDLE_N"))
	require.NoError(t, err)
	host, portStr, _ := strings.Cut(addr, ":")
	require.Equal(t, "127.0.0.1", host)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	sa := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		require.NoError(t, err)
		fds = append(fds, fd)
		require.NoError(t, unix.Connect(fd, sa))
	}
	_, _ = os.Stdout.WriteString("ready\n")
	_, _ = io.Copy(io.Discard, os.Stdin) // hold them until the benchmark closes stdin
}

// BenchmarkIdleConns measures what an idle connection costs the server's
// process: live heap (after GC) and RSS growth, per connection, with
// EVLOOP_IDLE_N (10,000 by default) connections held by a child process.
// Run with -benchtime 1x.
func BenchmarkIdleConns(b *testing.B) {
	n := 10000
	if v := os.Getenv("EVLOOP_IDLE_N"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	for range b.N {
		s, err := Listen("127.0.0.1:0", Options{})
		require.NoError(b, err)
		served := make(chan error, 1)
		go func() { served <- s.Serve() }()

		heap0, rss0 := memory(b)
		cmd := exec.Command(os.Args[0], "-test.run=^TestIdleClientsHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EVLOOP_IDLE_ADDR="+s.Addr().String(), "EVLOOP_IDLE_N="+strconv.Itoa(n))
		stdin, err := cmd.StdinPipe()
		require.NoError(b, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(b, err)
		cmd.Stderr = os.Stderr
		require.NoError(b, cmd.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(b, err, "the client process failed")
		require.Equal(b, "ready\n", line)
		require.Eventually(b, func() bool { return s.Stats().Conns == int64(n) }, time.Minute, 10*time.Millisecond)
		heap1, rss1 := memory(b)
		b.ReportMetric(float64(heap1-heap0)/float64(n), "heap-B/conn")
		b.ReportMetric(float64(rss1-rss0)/float64(n), "rss-B/conn")

		require.NoError(b, stdin.Close())
		_ = cmd.Wait()
		require.NoError(b, s.Close())
		require.ErrorIs(b, <-served, ErrServerClosed)
	}
}

// memory is the live heap after a collection, and the process's RSS.
func memory(b *testing.B) (heap, rss int64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	statm, err := os.ReadFile("/proc/self/statm")
	require.NoError(b, err)
	f := strings.Fields(string(statm))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(b, err)
	return int64(ms.HeapAlloc), pages * int64(os.Getpagesize())
}
