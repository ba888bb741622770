// Package fanout carries events between nodes through Redis pub/sub: a node
// publishes an event for one channel of one app, and every node with local
// subscribers of that channel receives it.
//
// Each (app, channel) is one Redis topic, <prefix>:{app}:ev:<channel>
// (prefix: Options.Keyspace, --redis-prefix, hc by default); this
// package alone builds those names. The {app} hash tag puts all of an app's
// topics in one slot. On a single Redis the Bus uses PUBLISH/SUBSCRIBE over
// one connection. On Redis Cluster it uses sharded pub/sub
// (SPUBLISH/SSUBSCRIBE: plain PUBLISH would be broadcast to every shard),
// with one connection per app, to the master of the app's slot, opened on
// the app's first Join and closed after its last Leave.
//
// A node subscribes only to the channels it has local interest in. Join and
// Leave are reference-counted and only change the desired state under a
// mutex; Run's goroutine turns changes into SUBSCRIBE and UNSUBSCRIBE
// commands in batches, so a Join followed by a Leave before that nets out
// to nothing. "Subscribed" starts when Redis answers the subscribe, not at
// Join: WaitJoined waits for that answer, so a message published after it
// returns reaches the node.
//
// Guarantees:
//
//   - Exactly once per node: a node joined to a channel delivers each
//     message published while it was subscribed once, however many times
//     Join was called (Redis subscriptions are a set per connection, and
//     each topic lives on exactly one connection). A publish whose reply is
//     lost is not sent again (go-redis's retries are off for it), since
//     Redis may have delivered it already.
//   - Per-channel order for one publisher: messages one Bus publishes on one
//     channel, each Publish returning before the next starts, are delivered
//     in that order on every node. There is no order across channels, nor
//     between publishers.
//   - At-most-once across Redis outages: messages published while a node's
//     subscription connection is down, or before its subscribe reached
//     Redis, are lost for that node, as Pusher's own delivery is. After a
//     disconnect or a Redis restart, the connection is redialled with
//     backoff and every wanted topic is subscribed again. A connection that
//     stays silent past a ping is treated as dead. On Redis Cluster, a slot
//     that moved to another master (Redis unsubscribes its shard channels)
//     is resubscribed there. Healthy is false until the subscriptions are
//     back; each outage is logged once.
//   - Leave stops delivery at once, before the unsubscribe reaches Redis.
//   - Messages that do not decode are dropped, counted and logged (rate
//     limited), never fatal.
//
// Sync is a barrier on the subscription side: it sends a PING on the
// connection that carries an app's channels and returns once the receive
// loop has read its answer, so every message Redis pushed to this node on
// that connection before the PING has been handed to deliver. A node that
// joined a channel, read some state the publishers write before they
// publish (a cache channel's last event), and then Syncs, has delivered
// every event published before that read.
//
// PublishBatch publishes several messages of one app in one pipeline (one
// round trip, one master on Cluster) and lets the caller queue its own
// commands on the same pipeline, such as reads of the app's counts; its
// delivery guarantees are Publish's.
//
// Concurrency: Publish, PublishBatch, Join, Leave, Sync and Healthy are safe for concurrent
// use, and Join and Leave never wait for Redis. One Run at a time; its
// deliver callback is never called concurrently, and a slow deliver delays
// every channel, so it must only hand the message on.
package fanout
