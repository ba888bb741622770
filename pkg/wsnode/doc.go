// Package wsnode is the WebSocket node: it speaks Pusher protocol v7 on
// /app/{key} (public, private, private-encrypted, presence, cache and
// #server-to-user- channels, pusher:signin, watchlists, client events),
// reports every subscription, presence member and connection to a
// counts.Recorder, which publishes them to Redis as this node's
// contribution, and exchanges events with the other nodes through a
// fanout.Bus. docs/INTERNALS.md ("wsnode") follows a socket's life through
// it; docs/PUSHER.md and docs/REFERENCE.md say what clients see.
//
// Guarantees:
//   - No client makes the node wait: each socket has a bounded send queue
//     and every write a timeout; a socket whose deliveries overflow is cut
//     as a slow consumer, and its own replies, and the WebSocket pongs it
//     is owed, only slow its reads (they count against the same budgets).
//   - A key the node does not serve, or serves disabled, is looked up in
//     the apps' source (appreload.Reloader.Lookup) before its socket is
//     refused with 4001 or 4003, which pusher-js never retries: an app
//     inserted a moment ago admits its first client. Only that handshake
//     waits (at most 10 s); one of an app served never does.
//   - What one client can hold or send is bounded (the port's
//     --max-sockets, a socket's channels, frames, message size, client
//     events; REFERENCE.md, "What bounds one client"). Every frame counts
//     against the frame budget, control frames and empty continuations
//     too, before it is acted on, on both transports.
//   - member_added and member_removed are sent once per user cluster-wide,
//     from the recorder's edges, never for what a subscriber's
//     subscription_succeeded listed already, and a presence channel never
//     seats more than its member limit across nodes, after Redis lost its
//     data too (a newcomer waits until every live node has republished).
//   - Delivery is at most once, as with Pusher: an event published during
//     a Redis outage is lost for the node's sockets; counts never are.
//     The exception is a channel with a history (replay.go): a subscriber
//     with a rewind, or a page that reconnects with its resume id, gets
//     the history it is owed and then live events with no gap or
//     reordering between them, or headcount:resume_failed naming what
//     the history no longer holds. A resumed page may get again what it
//     had not acknowledged (a pong to the node's ping, every second) and,
//     after its node's crash, one checkpoint interval (1 s) more. A
//     subscribe is answered once Redis has confirmed the node's
//     subscription to the channel (at most 1 s), so a client holding its
//     subscription_succeeded gets every event published after it. A run
//     of subscribes queued together shares one such wait, and their
//     answers keep their order.
//   - A stop closes every socket with 4200 over the drain window, announces
//     their leaving and removes the node's contribution from Redis.
//   - Every upgraded connection is counted once when it ends, refused ones
//     too, in disconnects_total under the close code it ended with (the
//     one the node sent or answered, else the client's, else 1006), on
//     both transports (TestDisconnectsByCloseCode).
//   - Both transports (--transport: the event loop, default on Linux, and
//     a goroutine per socket on coder/websocket) answer the same client
//     bytes with the same frames and close codes (TestTransportsAgree,
//     FuzzTransports), with two exceptions. A connection that ends
//     inside a message (a fragment left open, a payload cut short) ends
//     with no frame on the event loop, while the goroutine transport may
//     first answer the part as a whole message (coder/websocket reads
//     that EOF as the message's end). And on either, the reply to a
//     message that came in the same read as the close frame or the
//     connection's end may be dropped: the close is answered at once.
//     Both handle a socket's messages one at a time, in order, off the
//     loop: a handler waiting on Redis holds up no other socket. On the
//     event loop an idle socket holds no goroutine and no buffer
//     (docs/TRANSPORT.md).
//
// A connection is a socket, and what the node does for one connection is
// a method of *socket (socket.go, and each topic's steps in its file); App
// is the node and what acts on many sockets. docs/INTERNALS.md ("wsnode",
// "The code") says which file holds what.
//
// locks.go writes down the order in which the node's mutexes nest; built
// with -tags lockorder (make test), they check it as they are taken.
//
// App methods are safe for concurrent use. An App keeps lifecycle.Service:
// Run is called once, Stop any number of times from any goroutine, and a
// Stop before Run frees the listeners and the Redis client New took.
package wsnode
