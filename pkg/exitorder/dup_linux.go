package exitorder

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// dupAbove duplicates c's descriptor at the lowest free one at or above
// floor, close-on-exec.
func dupAbove(c net.Conn, floor int) (int, error) {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok { // crypto/tls
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("connection has no descriptor")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	dup, derr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, uintptr(floor))
		if errno != 0 {
			derr = errno
			return
		}
		dup = int(r)
	}); err != nil {
		return -1, err
	}
	return dup, derr
}

// maxDescriptors is the kernel's ceiling on a descriptor number
// (fs.nr_open), which an open-file limit above it does not lift.
func maxDescriptors() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 1 << 20
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 1 << 20
	}
	return n
}
