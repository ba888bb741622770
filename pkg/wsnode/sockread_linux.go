package wsnode

import (
	"syscall"
	"unsafe"
)

// peekReadable is a syscall.RawConn.Read callback that consumes nothing:
// it reports whether the socket has a byte, its end or an error to read,
// so that RawConn.Read parks in the runtime's poller until it does. A
// function, not a closure: waiting allocates nothing.
func peekReadable(fd uintptr) bool {
	var b byte
	_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b)), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return errno != syscall.EAGAIN
}
