// Package exitorder makes a killed process's chosen connections close
// before its others, so whoever holds their other ends learns of the death
// first.
//
// When Linux kills a process (SIGKILL, the OOM killer), the exiting task
// closes its descriptors in ascending order, but the close that releases a
// socket's last reference is only queued, and the queue runs last in,
// first out: the socket at the highest descriptor sends its FIN first and
// the one at the lowest last. A node holding 16,000 client sockets takes
// a few hundred milliseconds to send them all, and the connections that
// announce its death (its Redis liveness subscription, the cleaners'
// watches of its admin port) are opened early, at low descriptors, so
// they used to go last.
//
// A Placer duplicates a connection's descriptor at or above a floor that
// sits past every descriptor the client sockets can take, and keeps the
// duplicate until the connection closes: the socket's last reference is
// then that high descriptor, and the socket closes among the first.
// Placer.Above orders the placed ones too: a wsnode's Redis connections
// go above its admin port's, so Redis learns of the death (its liveness
// subscription closes) before a cleaner's watch ends and asks it. A
// Placer also records each duplicate for the exit anchor (below), up to
// 1,024 descriptors from New's floor.
//
// Yet Linux frees a killed process's memory before it closes any of its
// descriptors (11 ms for 50 MiB resident on a 2-core VM, 32 ms for 200
// MiB), and then walks the whole descriptor table before it releases the
// first (3 ms for 16,000). StartAnchor starts an exit anchor: a child
// process sharing the descriptor table (clone(2) with CLONE_FILES) and
// keeping only a few pages of its copy of the memory, blocked on a futex
// that two threads of the process, locked for its life, name as their
// clear_child_tid: the kernel zeroes it and wakes the futex as such a
// thread exits, the first thing a dying thread does with its memory (older
// kernels skip that in a death that dumps core: every 100 ms the anchor
// also looks at a pidfd of the process, so it still sees the end;
// TestAnchorLooksAtTheProcess). The anchor then shuts down every
// connection a Placer placed, highest descriptor first (shutdown(2): a FIN
// at once, whoever else holds the socket), lowers its priority, closes
// every descriptor, the highest released first, and exits. Beside it, a
// holder shares the memory and no descriptor and waits on a pidfd of the
// anchor, so the memory's last user, whose exit frees it, is the holder,
// after the closes. Both run a few instructions of assembly: no Go code,
// no stack, every signal blocked, so the Go runtime never sees them.
//
// A container's process is its PID namespace's init, whose death kills
// the namespace's other processes once its last thread has exited. With
// a holder, that comes at once, often before the anchor has run
// (BenchmarkKillToFirstClose, pid1: a median of 2.0-2.5 ms to the first
// close over 30 kills, against 0.8-1.7 without); so an init keeps no
// holder, and its last thread frees the memory first, while the anchor
// shuts the connections down.
//
// Guarantees:
//   - a placed connection behaves as the one it wraps (deadlines, reads,
//     writes, CloseWrite, SyscallConn where it had them); Close releases
//     the duplicate first, so the peer sees the close at once, as before;
//   - a placed connection that is never closed releases its duplicate when
//     it is collected, so the duplicate never holds a socket open by itself;
//   - placing is best effort: off on systems other than Linux, and when no
//     descriptor is free at or above the floor the connection is used as
//     it is (logged once);
//   - the kernel's descriptor table grows to the floor at the first
//     placement: 8 bytes per descriptor, about 8 MiB under the usual
//     container limit of 1,048,576 (the table a node at its socket cap
//     would hold anyway).
//   - the anchor shares the process's descriptor table and not its memory,
//     of which it keeps at most 64 kB (TestAnchorSharesFilesNotMemory),
//     so a connection the process closes closes at once; as the process
//     dies, whatever its memory or number of descriptors, it shuts down
//     the placed connections before any other descriptor is released
//     (TestAnchorShutsPlacedConnections; BenchmarkKillToFirstClose
//     measures the time), except where the kernel kills it first (an
//     init's last thread exiting before the anchor has run; a cgroup's OOM
//     kill, which takes them all at once): the anchor's own exit then
//     closes the descriptors, highest first;
//   - the anchor and its holder end after the process dies, never before
//     (every signal but SIGKILL and SIGSTOP is blocked); one pair per
//     process, whatever StartAnchor's calls;
//   - ps shows them as two more processes with the process's command line:
//     the anchor with a few pages, the holder with the process's memory
//     (counted once by the kernel and the container's cgroup); killed
//     alone, each is reaped and logged at warn and the process goes on
//     without it (the holder ends with its anchor);
//   - the anchor exists on Linux on amd64 only (its instructions are
//     per architecture); elsewhere StartAnchor returns an error.
package exitorder
