// Package portcap is a listening port's policy, shared by every port that
// faces clients: accepting with backoff, a cap on the connections open at
// once and its count, the refusal of a connection over the cap, and a
// lingering close that lets a client read the answer it was sent.
//
// Guarantees:
//
//   - A failed accept (out of file descriptors, say) is retried after
//     5 ms, doubling up to a second (NextBackoff), never at once, so a
//     full descriptor table costs no CPU to speak of; each failure is
//     reported to Config.OnEvent and logged at most once per
//     logging.RepeatEvery, with its count. Accept returns an error only
//     once its listener or the Port is closed.
//   - The cap never blocks accept: a connection over it is refused at
//     once, from the accept loop, before anything of it is read. It gets
//     Refusal: a fixed 503 with Retry-After: 1, Connection: close and a
//     body naming Config.Setting. Then its write side is shut and what it
//     still sends is discarded for up to LingerTimeout before the close,
//     at most RefusingAtOnce at a time; past that it is closed as soon as
//     the answer is written. Close closes those still lingering at once.
//   - A Conn is counted from Admit to its first Close, however that comes.
//   - Refusals are reported to Config.OnEvent and logged at most once per
//     logging.RepeatEvery, with their count.
//
// Who takes what: lifecycle's capped http.Server (httpapi's port) and
// wsfront's goroutine Front take all of it through a Port. wsfront's
// LoopFront accepts through pkg/evloop, so it takes the Port's cap check,
// its reports and Refusal, and lingers on the event loop instead of a
// goroutine; evloop, which accepts on a raw descriptor, takes
// NextBackoff. Clip is for error messages that quote client input.
//
// A Port is safe for concurrent use.
package portcap
