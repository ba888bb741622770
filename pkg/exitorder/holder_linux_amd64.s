//go:build linux && amd64

#include "textflag.h"

// HOLDER_PAGE is holderPage (anchor_linux.go).
#define HOLDER_PAGE 8192

// func cloneHolder(page *byte, pidfd uintptr) (pid int, errno syscall.Errno)
//
// page is holderPage bytes off the Go heap: [0,8) a full signal set, [8,16)
// the caller's saved signal mask, [16,24) the child's struct pollfd,
// [32,48) its NUL-terminated name; the child's stack ends at its top.
// pidfd is the anchor's, on which the holder waits.
//
// The child shares this process's memory (clone(2) with CLONE_VM) and
// runs only the instructions below: no Go code, nothing on its stack,
// every signal blocked (it inherits the mask set here), so the Go
// runtime, whose memory it shares, never sees it.
TEXT ·cloneHolder(SB),NOSPLIT,$0-32
	MOVQ	page+0(FP), R12
	MOVQ	pidfd+8(FP), R13

	// Block every signal in this thread, saving its mask.
	MOVQ	$-1, AX
	MOVQ	AX, 0(R12)
	MOVQ	$2, DI		// SIG_SETMASK
	LEAQ	0(R12), SI
	LEAQ	8(R12), DX
	MOVQ	$8, R10
	MOVQ	$14, AX		// rt_sigprocmask
	SYSCALL
	CMPQ	AX, $0xfffffffffffff001
	JCS	blocked
	NEGQ	AX
	MOVQ	$-1, pid+16(FP)
	MOVQ	AX, errno+24(FP)
	RET

blocked:
	MOVQ	$0x111, DI	// CLONE_VM | SIGCHLD
	LEAQ	HOLDER_PAGE(R12), SI
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
	LEAQ	8(R12), SI
	MOVQ	$0, DX
	MOVQ	$8, R10
	MOVQ	$14, AX
	SYSCALL

	CMPQ	BX, $0xfffffffffffff001
	JCS	cloned
	NEGQ	BX
	MOVQ	$-1, pid+16(FP)
	MOVQ	BX, errno+24(FP)
	RET
cloned:
	MOVQ	BX, pid+16(FP)
	MOVQ	$0, errno+24(FP)
	RET

child:
	// Name it.
	MOVQ	$15, DI		// PR_SET_NAME
	LEAQ	32(R12), SI
	MOVQ	$157, AX	// prctl
	SYSCALL

	// Hold no descriptor but pidfd: the copies this child got of the
	// process's would keep its sockets open.
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
	MOVL	R13, 16(R12)
	MOVW	$1, 20(R12)	// POLLIN
	MOVW	$0, 22(R12)
wait:
	LEAQ	16(R12), DI
	MOVQ	$1, SI
	MOVQ	$0, DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$271, AX	// ppoll
	SYSCALL
	CMPQ	AX, $0
	JGT	done
	CMPQ	AX, $-4		// EINTR
	JEQ	wait
	CMPQ	AX, $0
	JEQ	wait
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
