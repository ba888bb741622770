// Package wsnode is the WebSocket node: it speaks Pusher protocol v7 on
// /app/{key}, keeps each socket's public-channel subscriptions and reports
// every change to a counts.Recorder, which publishes them to Redis as this
// node's contribution.
//
// Concurrency: each socket is served by exactly one goroutine, the net/http
// handler goroutine that upgraded it; it reads frames and writes the
// replies, and it alone owns the socket's channel list. Other goroutines
// only close sockets (the drain and the sweeper); the connection's own
// locks make that safe. There are no per-socket timers: one sweeper
// goroutine closes sockets that stayed silent past the idle timeout or whose
// write has been stuck past the write timeout. The socket registry is
// sharded, each shard under its own lock. App methods are safe for
// concurrent use; Run may be called once.
//
// Shutdown (ctx cancelled or Stop): readiness goes false, the listener
// closes, sockets are closed with code 4200 spread over the drain window,
// and once every socket's decrements are recorded the node's contribution
// is removed from Redis. Run then returns nil.
package wsnode
