// Package evloop is a non-blocking TCP server for Linux with no goroutine
// per connection: a few event loops (one per core by default) each watch
// their share of the connections with epoll, read into one shared buffer,
// and write what a socket would not take once it is writable. It moves
// bytes only; protocols sit on top through Handler. Off Linux it builds and
// Listen fails with ErrUnsupported.
//
// Where things run:
//
//   - Accepting runs on Serve's goroutine, waiting in the runtime's poller
//     (accept4, non-blocking, close-on-exec). Options.OnAccept runs there,
//     before the connection's first event. A failed accept (EMFILE, ENFILE,
//     ...) is reported to Options.OnAcceptError and retried after 5 ms,
//     doubling to 1 s (portcap.NextBackoff) while it keeps failing: the
//     connection waits in the backlog meanwhile, and nothing spins.
//   - Each loop is one goroutine with its own epoll set. The set itself
//     waits in the runtime's poller (an epoll set is readable while it has
//     events), so an idle loop holds no OS thread, and a woken one calls
//     epoll_wait without blocking; where the poller refuses the set, the
//     loop blocks in epoll_wait instead. A connection belongs to the loop
//     of its descriptor modulo the number of loops. OnData, OnDrained and OnClose run on that loop, one
//     at a time per loop, and must not block: a callback that waits stalls
//     every connection of the loop. Work that waits (Redis, a queue) goes to
//     another goroutine.
//   - Conn's methods (Write, Close, CloseAfterFlush, CloseWrite, PauseRead,
//     ResumeRead, SetHandler, Pending, RemoteAddr) may be called from any
//     goroutine, callbacks included; a mutex per Conn orders them with the
//     loop. None blocks on the network. That mutex is a leaf of wsnode's
//     lock order (pkg/wsnode/locks.go): no other lock is taken under it,
//     and no callback runs under it.
//   - The system calls made per frame (a loop's read and its epoll_wait
//     without a timeout, a Write's writev) are raw: the scheduler sees a
//     function call, so a busy loop or writer keeps its P and its thread
//     instead of handing them over on every call that runs past 20 us.
//     They never wait: every descriptor is non-blocking.
//
// Guarantees:
//
//   - Order: bytes are handed to OnData in the order they arrived. Writes
//     leave in the order the Write calls took the connection's mutex: a
//     Write while output is pending only appends to it.
//   - Not copied: OnData's slice is the loop's read buffer, valid (and
//     writable) only during the call. Output a Write could not send at once
//     is kept by reference, the caller's slices themselves re-sliced past
//     what went out: a frame shared by thousands of connections is held
//     once, and must not be modified after Write. References are dropped as
//     the bytes leave, and all at once on close.
//   - Exactly one OnClose per accepted connection (none for one OnAccept
//     refused), after its descriptor is closed, on its loop, with the
//     reason: nil for Close and CloseAfterFlush, io.EOF when the peer ended
//     the stream, ErrServerClosed for Server.Close, else the socket's error
//     (a failed write among them). No OnData or OnDrained follows it. The
//     one exception to "on its loop": a close off the loop (Close, a failed
//     Write) that races Server.Close past the loop's end gets its OnClose on
//     a goroutine of its own. Never on the caller's: the caller may hold a
//     lock its OnClose takes.
//   - Generations: the table of connections is indexed by descriptor, and
//     each slot counts the connections that held it. Every epoll
//     registration carries the descriptor and that generation in the
//     event's 64 bits of data; an event whose generation is not its slot's
//     connection's is dropped (Stats.StaleEvents). So an event queued for a
//     descriptor that was closed, and reused by a new connection before the
//     loop dispatched it, never reaches the new connection.
//   - Level-triggered epoll: a loop reads each ready socket once per event
//     (at most the read buffer's size), so one busy socket cannot starve the
//     others, and bytes left in the kernel are reported again. PauseRead
//     takes the socket out of the read mask; ResumeRead puts it back, and
//     bytes that arrived meanwhile are reported at once: nothing is lost. A
//     paused socket whose peer resets it is still closed (EPOLLERR and
//     EPOLLHUP are reported whatever the mask).
//   - EPOLLOUT is armed only while output is pending: an idle connection
//     costs its Conn (80 bytes), a table slot (16) and no buffer.
//   - The peer's end of stream (read returns 0) closes the connection, and
//     drops output still pending.
//   - StopAccepting closes the listener and makes Serve return; the loops
//     go on serving the connections there are (a drain) until Close.
//   - Server.Close stops accepting first, then each loop closes its
//     connections (OnClose each), then the loops exit and the listener and
//     epoll descriptors are closed; no goroutine is left.
//
// Accepted sockets inherit TCP_NODELAY from the listener (as Go's net sets
// it on every connection) and have no TCP keepalive.
package evloop
