package evloop

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestAcceptBackoff fills the descriptor table (RLIMIT_NOFILE lowered to
// leave one free descriptor, which the client's socket takes): accepts
// fail with EMFILE and are retried after 5, 10, 20... ms, each failure
// reported, until a descriptor is free again.
func TestAcceptBackoff(t *testing.T) {
	var mu sync.Mutex
	var delays []time.Duration
	var errs []error
	onAccept, acc := accepting()
	s := startServer(t, Options{Loops: 1, OnAccept: onAccept, OnAcceptError: func(err error, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
		delays = append(delays, d)
	}})

	var orig syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig))
	// The lowest free descriptor: every one below it is in use.
	free, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	low := orig
	low.Cur = uint64(free) + 1
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	restored := false
	restore := func() {
		if !restored {
			restored = true
			require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig))
		}
	}
	defer restore()
	require.NoError(t, unix.Close(free))

	client, err := net.DialTimeout("tcp", s.Addr().String(), wait) // takes the free one
	require.NoError(t, err)
	defer client.Close()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(delays) >= 4 }, wait, tick)
	restore()
	a := next(t, acc)
	require.NotNil(t, a.c)

	mu.Lock()
	defer mu.Unlock()
	require.True(t, errors.Is(errs[0], unix.EMFILE), "%v", errs[0])
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}
	require.Equal(t, want, delays[:4])
	require.EqualValues(t, len(errs), s.Stats().AcceptErrors)
	require.LessOrEqual(t, len(errs), 6, "accept retried without backing off")
}
