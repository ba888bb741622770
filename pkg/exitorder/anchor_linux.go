//go:build linux && amd64

package exitorder

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The shared page's layout (anchor_linux_amd64.s says what each is).
const (
	pageSize   = 4096
	offWord    = 0
	offBase    = 24
	offName    = 32
	offGaps    = 48
	offTimeout = 112
	offBits    = 128
	offProcess = 256
	markedBits = 1024
	// lookEvery is how often the anchor looks whether the process has
	// ended though no watched thread's exit woke it (a death that dumps
	// core, on older kernels).
	lookEvery = 100 * time.Millisecond
	// userTop is where user memory ends with 4-level paging, and where
	// Go's maps end with 5-level paging too (nothing asks for higher).
	userTop = 0x7ffffffff000
	// keptSize is how much the anchor keeps from the first page of its
	// instructions (cloneChild is well under a page long) and of its
	// thread's base (glibc's struct pthread, in which the kernel updates
	// the rseq(2) area a fork inherits: a write there failing kills the
	// anchor).
	keptSize = 2 * pageSize
)

// watchers is how many threads of the process zero the anchor's word when
// they exit. The kernel skips that for the last user of a memory, and one
// of two threads is never last. (A variable for a test, which starts an
// anchor that no thread wakes.)
var watchers = 2

// anchorText, threadBase and cloneChild are in anchor_linux_amd64.s.
func anchorText() uintptr

func threadBase() uintptr

//go:noescape
func cloneChild(page *byte, flags, stack, pidfd uintptr) (pid int, errno syscall.Errno)

// The children's clone(2) flags: the anchor gets its own copy of the
// memory and this process's descriptor table, the holder this process's
// memory and its own table. SIGCHLD: this process reaps them.
const (
	anchorFlags = syscall.CLONE_FILES | uintptr(syscall.SIGCHLD)
	holderFlags = syscall.CLONE_VM | uintptr(syscall.SIGCHLD)
)

// shared is the page this process and its anchor both see: MAP_SHARED,
// mapped before the anchor is cloned, never unmapped.
var shared = sync.OnceValue(func() []byte {
	page, err := syscall.Mmap(-1, 0, pageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	return page
})

// in is the address of page[off], for the words the anchor reads there.
func in(page []byte, off int) unsafe.Pointer {
	return unsafe.Pointer(&page[off]) //nolint:gosec // G103: the page is shared with the anchor's assembly, word by word
}

func word64(page []byte, off int) *uint64 { return (*uint64)(in(page, off)) }

// mark records that fd holds a placed connection whose floor is floor,
// so the anchor shuts it down first. The set covers markedBits
// descriptors from the first floor marked; beyond, the kernel's order
// alone applies.
func mark(fd, floor int) {
	page := shared()
	if page == nil {
		return
	}
	atomic.CompareAndSwapInt64((*int64)(in(page, offBase)), 0, int64(floor))
	if word, bit, ok := markedBit(page, fd); ok {
		atomic.OrUint64(word, bit)
	}
}

// unmark forgets fd; called before fd is closed, so a number reused
// later is marked again only by its own placement.
func unmark(fd int) {
	page := shared()
	if page == nil {
		return
	}
	if word, bit, ok := markedBit(page, fd); ok {
		atomic.AndUint64(word, ^bit)
	}
}

// markedBit is fd's word and bit in the set, if the set covers it.
func markedBit(page []byte, fd int) (word *uint64, bit uint64, ok bool) {
	i := int64(fd) - atomic.LoadInt64((*int64)(in(page, offBase)))
	if i < 0 || i >= markedBits {
		return nil, 0, false
	}
	return word64(page, offBits+8*int(i/64)), 1 << (i % 64), true
}

func startAnchor(name, holder string) (anchorPid, holderPid int, err error) {
	page := shared()
	if page == nil {
		return 0, 0, fmt.Errorf("map the page shared with the anchor: %w", syscall.ENOMEM)
	}
	copy(page[offName:offName+15], name)
	// The watched threads: each names the word as its clear_child_tid,
	// which the kernel zeroes (and wakes the anchor's futex on) as the
	// thread exits, the first thing a dying thread does with its memory.
	word := (*uint32)(in(page, offWord))
	atomic.StoreUint32(word, 1)
	for range watchers {
		set := make(chan struct{})
		go watch(word, set)
		<-set
	}
	// A pidfd of this process, kept open for the anchor's looks; none (-1,
	// which poll(2) skips) where pidfd_open is refused.
	pidfd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(os.Getpid()), 0, 0)
	if errno != 0 {
		pidfd = ^uintptr(0)
	}
	*(*int32)(in(page, offProcess)) = int32(pidfd) //nolint:gosec // G115: a descriptor, or -1
	*(*int16)(in(page, offProcess+4)) = 1          // POLLIN
	// The look's timeout: tv_sec stays 0; the zero timespec after the
	// pollfd, untouched, is the look's own.
	*word64(page, offTimeout+8) = uint64(lookEvery)
	// The thread whose base threadBase reads is the one that clones.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unmapGaps(page, keptRanges(page))
	// Stack 0: the anchor keeps this thread's stack pointer, in its copy,
	// and pushes nothing.
	anchorPid, errno = cloneChild(&page[0], anchorFlags, 0, 0)
	if errno != 0 {
		return 0, 0, fmt.Errorf("clone the anchor: %w", errno)
	}
	if os.Getpid() == 1 {
		// A namespace's init: its last thread's exit kills the anchor.
		// Without a holder, that thread first frees the memory, which
		// leaves the anchor the time to shut the connections down.
		return anchorPid, 0, nil
	}
	if holderPid, err = startHolder(holder, anchorPid); err != nil {
		_ = syscall.Kill(anchorPid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(anchorPid, &ws, 0, nil)
		return 0, 0, err
	}
	return anchorPid, holderPid, nil
}

// keptRanges are what the anchor keeps of its copy of the memory: its
// instructions, the shared page and its thread's base, in address order.
func keptRanges(page []byte) [][2]uintptr {
	text, base := anchorText()&^(pageSize-1), threadBase()&^(pageSize-1)
	at := uintptr(in(page, 0))
	kept := [][2]uintptr{{text, text + keptSize}, {at, at + pageSize}, {base, base + keptSize}}
	sort.Slice(kept, func(i, j int) bool { return kept[i][0] < kept[j][0] })
	return kept
}

// unmapGaps writes into page the four ranges around kept that the anchor
// unmaps (a range it must keep can overlap another: the gap is then empty).
func unmapGaps(page []byte, kept [][2]uintptr) {
	from := uintptr(0)
	for i := range 4 {
		to := uintptr(userTop)
		if i < len(kept) {
			to = kept[i][0]
		}
		*word64(page, offGaps+16*i) = uint64(from)
		*word64(page, offGaps+16*i+8) = uint64(max(to, from) - from)
		if i < len(kept) {
			from = max(from, kept[i][1])
		}
	}
}

// watch locks a thread for the process's life and points its
// clear_child_tid at word.
func watch(word *uint32, set chan<- struct{}) {
	// Never unlocked: the thread ends with the process.
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_SET_TID_ADDRESS, uintptr(unsafe.Pointer(word)), 0, 0) //nolint:gosec // G103: a system call's pointer argument
	close(set)
	select {}
}

// holderPage is the holder's page: its stack, and the few words its
// clone needs (anchor_linux_amd64.s says which).
const holderPage = 8192

// sysPidfdOpen is pidfd_open(2), the same number on every architecture.
const sysPidfdOpen = 434

// startHolder starts the anchor's holder: a child sharing this process's
// memory and no descriptor but a pidfd of the anchor, on which it waits.
// The kernel frees a memory with its last user: the holder, once the
// anchor has closed the process's connections.
func startHolder(name string, anchorPid int) (int, error) {
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(anchorPid), 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("pidfd_open: %w", errno)
	}
	defer syscall.Close(int(fd)) //nolint:errcheck // the holder has its copy
	// The holder's page is never unmapped: it lives as long as the holder,
	// which is this process's life.
	page, err := syscall.Mmap(-1, 0, holderPage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return 0, fmt.Errorf("map the holder's stack: %w", err)
	}
	copy(page[offName:offName+15], name)
	pid, errno := cloneChild(&page[0], holderFlags, uintptr(in(page, 0))+holderPage, fd)
	if errno != 0 {
		_ = syscall.Munmap(page)
		return 0, fmt.Errorf("clone the holder: %w", errno)
	}
	return pid, nil
}
