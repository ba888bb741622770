//go:build linux && amd64

package exitorder

import (
	"fmt"
	"os"
	"syscall"
)

// anchorPage is the anchor's page: its stack, and the few words the clone
// needs off the Go heap (anchor_linux_amd64.s says which).
const anchorPage = 8192

// sysPidfdOpen is pidfd_open(2), the same number on every architecture.
const sysPidfdOpen = 434

// cloneAnchor is in anchor_linux_amd64.s.
//
//go:noescape
func cloneAnchor(page *byte, pidfd uintptr) (pid int, errno syscall.Errno)

func startAnchor(name string) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(os.Getpid()), 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("pidfd_open: %w", errno)
	}
	defer closeFD(int(fd))
	// The child's page is never unmapped: it lives as long as the child,
	// which is this process's life.
	page, err := syscall.Mmap(-1, 0, anchorPage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return 0, fmt.Errorf("map the anchor's stack: %w", err)
	}
	copy(page[32:47], name)
	pid, errno := cloneAnchor(&page[0], fd)
	if errno != 0 {
		_ = syscall.Munmap(page)
		return 0, fmt.Errorf("clone: %w", errno)
	}
	return pid, nil
}
