//go:build linux && amd64

#include "textflag.h"

// The offsets into a child's page: the anchor's shared page and the
// holder's own (anchor_linux.go).
#define SIGSET 8
#define SAVED 16
#define NAME 32
// The anchor's page only.
#define WORD 0
#define BASE 24
#define TIMEOUT 112
#define PROCESS 256
#define NOW 264
// The holder's page only.
#define POLLFD 24

// func anchorText() uintptr
//
// The address of cloneChild's instructions, which the anchor keeps mapped.
TEXT ·anchorText(SB),NOSPLIT,$0-8
	LEAQ	·cloneChild(SB), AX
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

// func cloneChild(page *byte, flags, stack, pidfd uintptr) (pid int, errno syscall.Errno)
//
// clone(2)s this thread with flags and stack, every signal blocked in the
// child (it inherits the mask set here), and runs in the child the
// anchor's instructions (flags without CLONE_VM) or the holder's (with
// it): no Go code, nothing on a stack, so the Go runtime never sees them.
//
// page, for both: [8,16) a full signal set, [16,24) the caller's saved
// signal mask, [32,48) the child's NUL-terminated name.
//
// The anchor's page is shared (MAP_SHARED, so it and this process see the
// same bytes): [0,4) a word the kernel zeroes when a watched thread of
// this process exits, [24,32) the descriptor bit 0 of the set stands for,
// [48,112) four (address, length) ranges the anchor unmaps, [112,128) how
// long a wait on the word lasts before it looks at [256,264), a struct
// pollfd for a pidfd of this process, with [264,280) a zero timeout,
// [128,256) the set of placed descriptors, 1,024 bits.
//
// The holder's page is its own: [24,32) its struct pollfd for pidfd, a
// pidfd of the anchor; its stack ends at the page's top.
TEXT ·cloneChild(SB),NOSPLIT,$0-48
	MOVQ	page+0(FP), R12
	MOVQ	pidfd+24(FP), R13

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
	MOVQ	$-1, pid+32(FP)
	MOVQ	AX, errno+40(FP)
	RET

blocked:
	MOVQ	flags+8(FP), DI
	MOVQ	stack+16(FP), SI
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
	MOVQ	$-1, pid+32(FP)
	MOVQ	BX, errno+40(FP)
	RET
cloned:
	MOVQ	BX, pid+32(FP)
	MOVQ	$0, errno+40(FP)
	RET

child:
	// DI still holds the flags: the system call left it alone.
	MOVQ	DI, BX
	// Name it.
	MOVQ	$15, DI		// PR_SET_NAME
	LEAQ	NAME(R12), SI
	MOVQ	$157, AX	// prctl
	SYSCALL
	TESTQ	$0x100, BX	// CLONE_VM
	JNE	holder

	// The anchor. Give back the copy of the memory but for these
	// instructions, the shared page and this thread's base: it holds a
	// few pages, whatever the process holds.
	MOVQ	$0, BX
unmap:
	MOVQ	48(R12)(BX*8), DI
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
	// zeroes the word and wakes this futex (set_tid_address(2)). Older
	// kernels leave the word alone in a death that dumps core: every so
	// often, the anchor also looks whether the process has ended.
wait:
	MOVL	WORD(R12), DX
	CMPL	DX, $0
	JEQ	dead
	LEAQ	WORD(R12), DI
	MOVQ	$0, SI		// FUTEX_WAIT, shared: the kernel's wake is
	LEAQ	TIMEOUT(R12), R10
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
	CMPQ	AX, $-110	// ETIMEDOUT
	JEQ	look
	MOVQ	$3, DI
	JMP	exit
look:
	LEAQ	PROCESS(R12), DI
	MOVQ	$1, SI
	LEAQ	NOW(R12), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$271, AX	// ppoll
	SYSCALL
	CMPQ	AX, $0
	JGT	dead		// its pidfd is readable: every thread has exited
	JMP	wait

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
	MOVQ	128(R12)(CX*8), DX	// the set
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
	JMP	exit

holder:
	// The holder. Hold no descriptor but pidfd: the copies this child got
	// of the process's would keep its sockets open.
	CMPQ	R13, $0
	JEQ	above
	MOVQ	$0, DI
	LEAQ	-1(R13), SI
	MOVQ	$0, DX
	MOVQ	$436, AX	// close_range
	SYSCALL
	CMPQ	AX, $0
	JNE	failed
above:
	LEAQ	1(R13), DI
	MOVQ	$0xffffffff, SI
	MOVQ	$0, DX
	MOVQ	$436, AX	// close_range
	SYSCALL
	CMPQ	AX, $0
	JNE	failed

	// Wait until the anchor has exited, its closes done.
	MOVL	R13, POLLFD(R12)
	MOVW	$1, 28(R12)	// POLLIN, the events after the descriptor
	MOVW	$0, 30(R12)
poll:
	LEAQ	POLLFD(R12), DI
	MOVQ	$1, SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$271, AX	// ppoll
	SYSCALL
	CMPQ	AX, $0
	JGT	done
	CMPQ	AX, $-4		// EINTR
	JEQ	poll
	CMPQ	AX, $0
	JEQ	poll
	MOVQ	$3, DI
	JMP	exit
done:
	MOVQ	$0, DI
	JMP	exit
failed:
	MOVQ	$2, DI
exit:
	MOVQ	$231, AX	// exit_group
	SYSCALL
	JMP	exit
