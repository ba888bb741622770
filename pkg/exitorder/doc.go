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
// subscription closes) before a cleaner's watch ends and asks it.
//
// Yet Linux frees a killed process's memory before it closes any of its
// descriptors: 11 ms for 50 MiB resident on a 2-core VM, 32 ms for 200
// MiB, before the first close. HoldMemory starts an exit anchor: a child
// process sharing the memory (clone(2) with CLONE_VM and nothing else),
// born with a copy of the descriptor table that it closes at once but for
// a pidfd of its parent, on which it waits. The kernel frees a memory only
// with its last user, so a killed process with an anchor closes its
// descriptors first; once every thread of it has exited, the pidfd wakes
// the anchor, whose exit frees the memory. Its few instructions are
// assembly: it runs no Go code, uses its own stack and has every signal
// blocked, so the Go runtime whose memory it shares never sees it.
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
//   - the anchor holds no descriptor of the process
//     (TestAnchorSharesMemoryHoldsNoFiles), so a connection the process
//     closes closes at once, and it ends after the process, killed or
//     exiting, never before (its pidfd wakes it, and every signal but
//     SIGKILL and SIGSTOP is blocked), except that the OOM killer kills
//     it with the process, as they share the memory; one per process,
//     whatever HoldMemory's calls;
//   - ps shows the anchor as a second process with the same command line
//     and memory (the memory is counted once by the kernel and the
//     container's cgroup); killed alone, it is reaped and logged at warn,
//     and the process goes on without it;
//   - the anchor exists on Linux on amd64 only (its instructions are
//     per architecture); elsewhere HoldMemory returns an error.
package exitorder
