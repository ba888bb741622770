// Package wsfront serves a WebSocket port without net/http's server: a
// Front accepts connections, reads each request head into a pooled buffer,
// parses it, and hands an upgrade of GET /app/{key} or /r/{id}/app/{key}
// (ParsePath: id is the page's resume id) to its handler with a
// minimal http.Request and a ResponseWriter that websocket.Accept can
// hijack. The owner of the sockets chooses what the hijack hands over
// (Options.Hijack): its buffers, and when the 101 leaves.
//
// Guarantees:
//
//   - It refuses what net/http's server refuses, with the same status: a
//     method that is not a token, control bytes in the target, a version
//     other than HTTP/1.x (505), header names that are not tokens, control
//     bytes in header values, a repeated or malformed Host, or none on
//     HTTP/1.1 (400). It is stricter on purpose: folded header lines, an
//     empty Host on HTTP/1.1, targets not starting with "/", any request
//     with a body (400) and a head over 16 KiB (431; net/http allows
//     1 MiB) are refused too. A path ParsePath refuses (not /app/{key}
//     or /r/{id}/app/{key}, or an id not 8-64 characters of A-Z a-z 0-9
//     _ -) gets 404 without reaching the handler, its reason logged at
//     debug. FuzzFrontHead holds
//     the parser to this: every head it accepts, net/http's server accepts
//     and reads the same way.
//   - A client has 10 s to send its request head; one sweeper goroutine
//     closes the connections past it, with no timer per connection.
//   - An error response reaches the client: it is written, the write side
//     shut, and what the client still sends read and discarded for up to a
//     second before the close, so a client still sending its request reads
//     the answer rather than a reset.
//   - At most Options.MaxConns connections are open at once, those still
//     sending their head and upgraded sockets alike, counted from their
//     accept to their first Close: an upgrade hands over a wrapper of the
//     accepted Conn, so however a socket ends, its close gives its place
//     back. The accept loop answers a connection past the cap with
//     pkg/portcap's refusal (a fixed 503 with Retry-After: 1) before
//     reading anything and closes it (draining it on a short goroutine, at
//     most 16 at a time, else closing at once), so that one client cannot
//     take the file descriptors the process needs elsewhere.
//   - A failed accept (out of descriptors, say) is retried after 5 ms,
//     doubling up to a second (portcap). Cap refusals and accept failures
//     are each logged at most once per 10 s; every one is reported to
//     Options.OnRefuse with its Reason.
//   - Shutdown stops accepting, closes the connections still reading their
//     head and the refusals still draining, and waits, up to its timeout,
//     for handshakes in progress. Upgraded sockets are not touched: they
//     are their owner's to close.
//
// Concurrency: each accepted connection's handshake runs on a goroutine of
// its own, which goes on to run the handler; Serve runs the accept loop;
// Addr, Open, MaxConns and Shutdown are safe for concurrent use, and
// Shutdown may be called more than once.
//
// LoopFront (Linux) is the same front on pkg/evloop's loops, for the
// event-loop transport: both hold the same rules (the port's portcap.Port,
// the routes, the head timeout). It keeps every guarantee above, with
// these differences:
//
//   - No goroutine per connection: the request head is gathered on the
//     loop (a buffer per connection only while its head is incomplete) and
//     parsed by the same code (route, parseRequest), so FuzzFrontHead holds
//     both fronts. An upgrade runs UpgradeFunc on a goroutine of its own
//     with reading paused; what the client sent behind its head is passed
//     as early, to be handled before anything read later.
//   - The cap's count is the loop's count of connections less the ones
//     refused at the cap that are still draining; the 503 is written in
//     the accept callback. The refusals' linger is bounded the same way (16
//     at cap at once, the rest closed once the answer is out); it runs on
//     the loop (half-close, discard, a timer per connection) instead of a
//     goroutine.
//   - Shutdown stops accepting, closes the connections still sending their
//     head and waits for UpgradeFuncs in progress; Serve then returns nil.
//     The loops go on serving upgraded sockets until Close, which ends them
//     and leaves no goroutine.
//   - A client that resets its connection while its UpgradeFunc runs is
//     closed and uncounted at once; its OnClose goes to whichever handler
//     the connection has then, so an UpgradeFunc that takes it afterwards
//     learns of the end from Write's evloop.ErrClosed.
package wsfront
