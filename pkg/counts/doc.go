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
//     state, never deltas on top of an unknown state. After any error whose
//     outcome is unknown it also republishes, so a retried write can never
//     count twice. A republish is bounded units, never one script the size
//     of the node: one moves the contribution Redis holds aside as a reap
//     under way (the node stays registered, empty), delta units of at most
//     SliceSize fields write the local truth, then reap slices subtract the
//     old.
//     The invariant below holds after each; counts read meanwhile include
//     both (new added before old subtracted, so no member or channel both
//     hold is announced as leaving); a republish that fails or meets a reap
//     starts again from the top at the next flush.
//   - Epochs fence a node's units: each republish gives the node a fresh
//     random epoch in the same unit as the retire (the app's epochs hash,
//     node -> token), and every delta and heartbeat carries the epoch it
//     was made under; apply.lua refuses one whose epoch is not the node's
//     current one. So a unit the client gave up on (a timeout) but Redis
//     ran after the node's next republish never lands on the republished
//     truth: Redis ran it before the retire, into the contribution the
//     retire took away, or not at all. A reap and a graceful removal delete
//     the node's epoch with its registration, so the hash holds registered
//     nodes only.
//   - Counts never go below zero, and a channel or node entry that reaches
//     zero is removed in the same atomic unit.
//   - Reaping a dead node is a sequence of atomic units, none longer than
//     Store.SliceSize fields whatever the node holds. The first re-checks
//     staleness by Redis's clock (a node that came back is spared),
//     unregisters the node (its further deltas are refused, so it
//     republishes whole) and renames its contribution under a key of this
//     reap alone, which no republish writes. Each later unit subtracts some
//     of those fields from the globals and deletes exactly them, so a field
//     is subtracted once however many cleaners drain the same reap, and
//     logs its own edges (member leaves before channels' vacated). Until
//     the last, the globals equal the sum of the registered contributions
//     and of the reaps under way; a reap left half done (its cleaner died)
//     is listed, and Store.FinishReaps, run by the cleaner's scan, drains
//     it. A drain keeps two of these units in flight (a store at most
//     eight, over all its drains), its scan of the names reading ahead,
//     so Redis never idles for a round trip between two and another
//     client waits behind two at most. Since each subtracts only what it
//     deletes, neither their order nor a field sent twice changes what is
//     subtracted; the one order kept is the event log's: the field of a
//     channel that has members goes after every other unit of the drain
//     has answered, so its members' leaves are logged before its vacated.
//   - Every key of an app carries {app} as a hash tag: each atomic unit is
//     single-slot and runs unchanged on Redis Cluster. Every key starts
//     with the deployment's prefix (the Keyspace given to NewStore,
//     NewRecorder, NewListings and the liveness constructors), so counts of
//     different prefixes never meet; keys.go alone spells the names.
//   - Liveness (liveness.go): each process holds a subscription to its own
//     liveness channel, <prefix>:{liveness}:node:<id> (a cleaner's canary
//     is <prefix>:{liveness}:cleaner:<id>); Redis drops it when the process's
//     connections close. All share one hash tag, so on Cluster they are
//     sharded channels on one shard, and Store.Liveness checks any number
//     of nodes there with one PUBSUB SHARDNUMSUB (NUMSUB on a single
//     Redis). Nothing is published on them. The subscription is redialled
//     with backoff (20 ms doubling to 500 ms; 20 ms after a connection
//     that went silent, which waited two pings) and pinged every
//     heartbeat; a connection that goes silent (a partition, a pause) is
//     kept open until a new subscription is confirmed, so only a closed
//     connection, never a silent one, makes a live node look dead.
//   - Node-level last-seen (RecorderOptions.Liveness): beside the per-app
//     last-seen, a node's recorder records with every flush, as a command
//     of its own on the liveness shard (so the per-app units stay
//     single-slot), when the node last wrote (by that shard's clock) and
//     whether its liveness subscription was confirmed; a confirmation is
//     recorded as soon as it comes. Store.LivenessCandidates finds the
//     nodes past a grace in one script, O(log nodes + nodes returned),
//     whatever the number of apps, and drops entries older than its window
//     (dead-after), so the set holds only nodes seen that recently. A
//     failure to record it never fails a flush. Remove, and the cleaner
//     once it has reaped a node everywhere (ForgetNode), delete it.
//
// The event log (package eventlog, which owns its keys, entry cap, budget
// and Lua): the count scripts log an app's occupancy, member and count
// changes as markers in the same unit as the count change, declaring the
// log and its index among their keys and getting what to log as an
// argument (eventlog.Spec), with the name prefix of the server's internal
// channels (protocol.InternalPrefix), whose edges they never log:
// protocol.SignedInChannel's members (the signed-in users) are counted like
// presence members but are nobody's webhook; and that of presence
// channels, whose counts they never log. Markers are held to the log's
// byte budget like every event: with the log full, the count change is
// made and its marker refused and counted.
//
// Versions: every unit that changes a channel count gives its counts a
// version (scripts/lib.lua next_version), above every earlier unit's of the
// app, from the app's seq key and the shard's clock; Edges.Versions carries
// it, and merged edges keep each channel's latest, so the announcements of
// different nodes can be ordered by their receivers.
//
// Audit and repair (audit.go, scripts/audit.lua, scripts/repair.lua):
//
//   - Audit compares an app's channel counts, presence members and
//     connections with the sum of the contributions (registered nodes' and
//     reaps' under way) in slices, each one read-only script over a few
//     entries that reads both sides of each in one unit: concurrent writers
//     never make it report drift that is not there, however many flushes
//     land between slices. It walks the global side (ZSCAN of the global
//     counts, SCAN for member hashes and HSCAN of each, conns), then each
//     contribution's fields (HSCAN) for entries no global holds. The
//     SCANs are not atomic, only lists of names: an entry that exists
//     throughout the audit is compared; drift born during it may wait for
//     the next. Like every script here a slice reads only keys it was
//     given; one that finds a contribution it was not given compares
//     nothing and is run again with it.
//   - Cost: a slice is O(contributions x entries in it), sized so it reads
//     about 4 x SliceSize contribution entries; the whole audit is
//     O(contributions x global entries + contribution fields) spread over
//     that many short scripts (docs/SCALING.md has the measurements).
//   - Repair fixes one entry per script: it sums the contributions
//     (registered nodes' and reaps' under way) to that entry and writes the global in the same unit,
//     deleting an entry that reaches 0. An apply or reap before it is in
//     the sum, one after it moves contribution and global together, so
//     concurrent updates are kept. It never writes a contribution, and
//     announces nothing (no member_added/member_removed).
//
// The read side beyond single counts (listing.go, Listings):
//
//   - Top and Channel's rank read the global sorted set (ZREVRANGE,
//     ZREVRANK) in O(log n + N) and O(log n); a rank is read in the same
//     script as its count.
//   - Page walks a snapshot of the occupied names (every score 0, so
//     ZRANGE BYLEX orders by name), with a TTL: no channel twice, none that
//     stayed occupied missed, whatever the counts do meanwhile. The
//     snapshot is copied ScanCount names per command (ZSCAN, ZADD into a
//     building key renamed into place when complete), so no command grows
//     with the app.
//   - ReadListing reads ScanCount channels per command too: each count is
//     exact when its slice was read, and a channel occupied throughout is
//     listed once.
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
// and never blocks on Redis; one goroutine runs Recorder.Run, and one
// Liveness.Run.
package counts
