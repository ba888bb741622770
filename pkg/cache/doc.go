// Package cache keeps the last event of each cache channel (cache-,
// private-cache-, private-encrypted-cache-, presence-cache-) in Redis, for
// the new subscribers of any wsnode, and says when a subscriber found none
// (pusher:cache_miss, the cache_miss webhook).
//
// Each entry is one string key under the app's hash tag,
// <prefix>:{app}:cache:<channel>, holding the event's name and data,
// written with a TTL (DefaultTTL: Pusher's 30 minutes) by every publish of
// the HTTP API on the channel, single or batch, through QueueSet. Client
// events are not cached, as Pusher and soketi do not cache them. This
// package alone builds the keys (keys.go).
//
// Guarantees:
//
//   - Written before published: QueueSet is queued on the publish's own
//     pipeline ahead of the event's PUBLISH, so once a node's subscription
//     to the channel is confirmed, every event is either in the entry when
//     the node reads it (Fetch) or published after that read and delivered
//     live. A subscriber reading after its node's subscription is
//     confirmed misses nothing; it may get the read event twice, cached
//     and live, when it was written before the read and published after.
//     (The order against live events published before the read is the
//     reader's to keep: wsnode syncs with its subscription connection.)
//   - Cluster-wide and crash-proof: the entry lives in Redis, not in a
//     node, so a subscriber on any wsnode reads it, and a node's death
//     loses nothing.
//   - The last write wins. Publishes of one publisher on one channel are
//     written in order; two publishers racing on one channel have no order
//     (as for delivery), so the entry holds whichever reached Redis last.
//   - One cache_miss webhook per empty channel per MissReportWindow,
//     whatever the subscribers and nodes: Fetch reports a miss to the
//     webhook only when it sets the channel's miss marker (SET NX, in the
//     same script as the read); a publish deletes the marker, so the next
//     miss after the entry expires is reported again.
//   - Bounded work: every script touches one entry and one marker, O(1).
//
// Concurrency: a Store is safe for concurrent use.
package cache
