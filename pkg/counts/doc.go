// Package counts keeps exact, crash-proof subscription counts in Redis.
//
// Per app, Redis holds each wsnode's contribution (channel -> that node's
// subscriptions), a global sorted set (channel -> sum of the contributions of
// live nodes) and each node's last-seen time. Guarantees:
//
//   - Every change touches a node's contribution, the global counts and the
//     node's last-seen in one atomic unit (a Lua script, because the write
//     must be refused when the node is no longer registered), so the global
//     always equals the sum of the registered contributions.
//   - A node that was reaped while alive, or whose Redis lost its data, is
//     told so by its next write or heartbeat and republishes its whole local
//     state (an idempotent replace), never deltas on top of an unknown state.
//     After any error whose outcome is unknown it also replaces, so a retried
//     write can never count twice.
//   - Counts never go below zero, and a channel or node entry that reaches
//     zero is removed in the same atomic unit.
//   - Reaping a dead node subtracts its contribution and deletes it in one
//     atomic unit that re-checks staleness by Redis's clock, so two cleaners
//     reaping at once subtract once, and a node that came back is spared.
//   - Every key of an app carries {app} as a hash tag: each atomic unit is
//     single-slot and runs unchanged on Redis Cluster.
//
// The read side beyond single counts (listing.go, Listings):
//
//   - Top and Channel's rank read the global sorted set (ZREVRANGE,
//     ZREVRANK) in O(log n + N) and O(log n); a rank is read in the same
//     script as its count.
//   - Page walks a snapshot of the occupied names (ZUNIONSTORE WEIGHTS 0,
//     so every score is 0 and ZRANGE BYLEX orders by name), with a TTL: no
//     channel twice, none that stayed occupied missed, whatever the counts
//     do meanwhile.
//   - SharedListing computes a full listing once across every process on
//     the same Redis: a SET NX PX lock decides who computes, the others poll
//     for the cached result, and the lock (LockTTL) expires before the cache
//     (CacheTTL), so a dead computer delays the others by at most LockTTL.
//   - Every read reports its Freshness by the app's own Redis clock.
//
// Listing caches, locks and snapshots are the only keys with a TTL; losing
// one costs a recomputation, never a wrong count.
//
// Store and Listings are safe for concurrent use. Recorder.Add is safe for concurrent use
// and never blocks on Redis; one goroutine runs Recorder.Run.
package counts
