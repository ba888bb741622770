// Package fanout carries events between nodes through Redis pub/sub: a node
// publishes an event for one channel of one app, and every node with local
// subscribers of that channel receives it. Sync is a barrier on the
// subscription side, PublishBatch publishes several messages of one app in
// one round trip; docs/INTERNALS.md ("fanout") has the topics, the
// subscription runner and both in detail.
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
//   - History: a message whose channel has a history rule (Message.Keep)
//     is recorded and published by one script of package history, so its
//     Serial, set on receipt, orders the channel's messages as every node
//     receives them. Sent by EVALSHA, and again by EVAL only after
//     NOSCRIPT, which proves it never ran: never recorded or sent twice.
//     Any other message is a plain PUBLISH, as before.
//   - Leave stops delivery at once, before the unsubscribe reaches Redis.
//   - WaitJoined returns once Redis has run the subscribe of the interest
//     now joined: a channel left and joined again is confirmed by the
//     answer to the SUBSCRIBE sent after its UNSUBSCRIBE, never by one
//     sent before it, however many are in flight.
//   - Messages that do not decode are dropped, counted and logged (rate
//     limited), never fatal.
//
// Concurrency: Publish, PublishBatch, Join, Leave, Sync and Healthy are
// safe for concurrent use, and Join and Leave never wait for Redis. One Run
// at a time; its deliver callback is never called concurrently, and a slow deliver delays
// every channel, so it must only hand the message on.
package fanout
