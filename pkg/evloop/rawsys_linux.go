package evloop

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls the loops and writers make per frame (writev, read, and
// epoll_wait without a timeout) are made raw: to Go's scheduler they are
// function calls. A call through unix.Syscall gives up the goroutine's P
// for its length, and one past 20 us, which a writev often is since the
// kernel runs a loopback peer's receive inside it, lets the runtime's
// monitor thread hand the P to another thread. During a delivery to
// thousands of sockets that woke the monitor every ~140 us and moved the
// writer from thread to thread: a quarter of the node's CPU, and the
// context switches of two threads on a core the clients also need
// (docs/TRANSPORT.md, "Beside soketi"). None of these calls waits: every
// descriptor is non-blocking and the epoll set is polled, so a raw call
// holds its P only while the kernel works.

// inlineIovecs is how many buffers a writev describes without an
// allocation: a frame's header and payload, or a few queued frames.
const inlineIovecs = 16

// rawWritev is writev(2) of bufs, none empty, at most maxIovecs of them.
func rawWritev(fd int32, bufs [][]byte) (int, error) {
	var inline [inlineIovecs]unix.Iovec
	iovs := inline[:0]
	if len(bufs) > inlineIovecs {
		iovs = make([]unix.Iovec, 0, len(bufs))
	}
	for _, b := range bufs {
		v := unix.Iovec{Base: &b[0]}
		v.SetLen(len(b))
		iovs = append(iovs, v)
	}
	n, _, errno := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iovs[0])), uintptr(len(iovs))) //nolint:gosec // G103: a system call's pointer argument
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawRead is read(2) into b, not empty.
func rawRead(fd int32, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b))) //nolint:gosec // G103: a system call's pointer argument
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawPoll is epoll_wait(2) on epfd with a zero timeout: the events ready now.
// epoll_pwait, since arm64 has no epoll_wait.
func rawPoll(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0) //nolint:gosec // G103: a system call's pointer argument
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
