//go:build linux

package proctest

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// kcmp(2)'s types, which x/sys does not name.
const (
	kcmpVM    = 1
	kcmpFiles = 2
)

// SharesMemory reports whether processes a and b share one memory, by
// kcmp(2); ok is false where kcmp is not allowed here.
func SharesMemory(a, b int) (same, ok bool) { return kcmp(a, b, kcmpVM) }

// SharesFiles reports whether processes a and b share one descriptor
// table, by kcmp(2); ok is false where kcmp is not allowed here.
func SharesFiles(a, b int) (same, ok bool) { return kcmp(a, b, kcmpFiles) }

func kcmp(a, b, what int) (same, ok bool) {
	r, _, errno := unix.Syscall6(unix.SYS_KCMP, uintptr(a), uintptr(b), uintptr(what), 0, 0, 0)
	if errno == syscall.EPERM || errno == syscall.ENOSYS || errno == syscall.ESRCH {
		return false, false
	}
	return errno == 0 && r == 0, true
}
