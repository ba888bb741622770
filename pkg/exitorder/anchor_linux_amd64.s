//go:build linux && amd64

#include "textflag.h"

// The offsets into the shared page (shared_linux_amd64.go).
#define WORD 0
#define SIGSET 8
#define SAVED 16
#define BASE 24
#define NAME 32

// func anchorText() uintptr
//
// The address of cloneAnchor's instructions, which the anchor keeps mapped.
TEXT ·anchorText(SB),NOSPLIT,$0-8
	LEAQ	·cloneAnchor(SB), AX
	MOVQ	AX, ret+0(FP)
	RET

// func threadBase() uintptr
//
// This thread's FS base (arch_prctl(2)): with glibc, its rseq(2) area is
// there, which the kernel writes into after a fork too.
TEXT ·threadBase(SB),NOSPLIT,$0-8
	MOVQ	$0x1003, DI	// ARCH_GET_FS
	LEAQ	ret+0(FP), SI
	MOVQ	$158, AX	// arch_prctl
	SYSCALL
	RET

// func cloneAnchor(page *byte) (pid int, errno syscall.Errno)
//
// page is the shared page (MAP_SHARED, so the anchor and this process see
// the same bytes): [0,4) a word the kernel zeroes when a watched thread of
// this process exits, [8,16) a full signal set, [16,24) the caller's saved
// signal mask, [24,32) the descriptor bit 0 of the set stands for, [32,48)
// the anchor's NUL-terminated name, [48,112) four (address, length)
// ranges the anchor unmaps, [128,256) the set of placed descriptors, 1,024 bits.
//
// The child is a copy of this thread in a copy of the memory, sharing the
// descriptor table (clone(2) with CLONE_FILES): it runs only the
// instructions below, uses no stack, and has every signal blocked (it
// inherits the mask set here).
TEXT ·cloneAnchor(SB),NOSPLIT,$0-24
	MOVQ	page+0(FP), R12

	// Block every signal in this thread, saving its mask.
	MOVQ	$-1, AX
	MOVQ	AX, SIGSET(R12)
	MOVQ	$2, DI		// SIG_SETMASK
	LEAQ	SIGSET(R12), SI
	LEAQ	SAVED(R12), DX
	MOVQ	$8, R10
	MOVQ	$14, AX		// rt_sigprocmask
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCS	blocked
	NEGQ	AX
	MOVQ	$-1, pid+8(FP)
	MOVQ	AX, errno+16(FP)
	RET

blocked:
	MOVQ	$0x411, DI	// CLONE_FILES | SIGCHLD: its own memory, this table
	MOVQ	$0, SI		// the same stack pointer, in its copy; it pushes nothing
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$56, AX		// clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	MOVQ	AX, BX

	// Restore this thread's mask.
	MOVQ	$2, DI
	LEAQ	SAVED(R12), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	MOVQ	$14, AX
	SYSCALL

	CMPQ	BX, $0xfffffffffffff001
	JCS	cloned
	NEGQ	BX
	MOVQ	$-1, pid+8(FP)
	MOVQ	BX, errno+16(FP)
	RET
cloned:
	MOVQ	BX, pid+8(FP)
	MOVQ	$0, errno+16(FP)
	RET

child:
	// Name it.
	MOVQ	$15, DI		// PR_SET_NAME
	LEAQ	NAME(R12), SI
	MOVQ	$157, AX	// prctl
	SYSCALL

	// Give back the copy of the memory but for these instructions and the
	// shared page: the anchor holds a few pages, whatever the process holds.
	MOVQ	$0, BX
unmap:
	MOVQ	48(R12)(BX*8), DI	// GAPS
	MOVQ	56(R12)(BX*8), SI
	CMPQ	SI, $0
	JEQ	unmapped
	MOVQ	$11, AX		// munmap
	SYSCALL
unmapped:
	ADDQ	$2, BX
	CMPQ	BX, $8
	JLT	unmap

	// Wait until a watched thread of the process has exited: the kernel
	// zeroes the word and wakes this futex (set_tid_address(2)).
wait:
	MOVL	WORD(R12), DX
	CMPL	DX, $0
	JEQ	dead
	LEAQ	WORD(R12), DI
	MOVQ	$0, SI		// FUTEX_WAIT, shared: the kernel's wake is
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	MOVQ	$202, AX	// futex
	SYSCALL
	CMPQ	AX, $0
	JEQ	wait
	CMPQ	AX, $-11	// EAGAIN: the word changed
	JEQ	wait
	CMPQ	AX, $-4		// EINTR
	JEQ	wait
	MOVQ	$3, DI
	JMP	exit

dead:
	// Shut the placed connections down, highest descriptor first: a FIN
	// now, whatever else still holds their sockets.
	MOVQ	BASE(R12), R13
	CMPQ	R13, $0
	JEQ	closeall
	MOVQ	$1023, BX
shut:
	MOVQ	BX, CX
	SHRQ	$6, CX
	MOVQ	128(R12)(CX*8), DX	// BITS
	BTQ	BX, DX
	JCC	next
	LEAQ	(R13)(BX*1), DI
	MOVQ	$2, SI		// SHUT_RDWR
	MOVQ	$48, AX		// shutdown
	SYSCALL
next:
	DECQ	BX
	JGE	shut

closeall:
	// Then close every descriptor, the highest released first, at the
	// lowest priority: the reap those FINs start comes first. On a kernel
	// without close_range(2) the exit below closes them.
	MOVQ	$0, DI		// PRIO_PROCESS
	MOVQ	$0, SI		// this process
	MOVQ	$19, DX
	MOVQ	$141, AX	// setpriority
	SYSCALL
	MOVQ	$0, DI
	MOVQ	$0xffffffff, SI
	MOVQ	$0, DX
	MOVQ	$436, AX	// close_range
	SYSCALL
	MOVQ	$0, DI
exit:
	MOVQ	$231, AX	// exit_group
	SYSCALL
	JMP	exit
