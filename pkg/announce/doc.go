// Package announce turns a change of the counts or of an admission gate
// into everything it causes, the same way in every process that sees one:
// a wsnode's flush, a node's removal, the cleaner's reap of a dead node,
// and each gate call of the HTTP API and the wsnodes.
//
// For count changes (counts.Edges), an Announcer publishes on the bus:
//
//   - member_added for a presence member's first socket in the cluster, to
//     everyone but the member's own sockets, and member_removed for their
//     last, each with its unit's version (counts.MemberEdge.Version), so a
//     node skips the subscribers whose member list holds it already;
//   - for protocol.SignedInChannel, whose members are the users signed in
//     anywhere, neither of those but the user's online or offline edge on
//     protocol.WatchUserChannel, which reaches the nodes holding sockets
//     that watch the user (a signin's watchlist);
//   - the admission gate's Left for each member who left, so a
//     capacity-limited channel keeps their seat for the grace;
//   - the new count of each channel whose kind announces counts
//     (protocol.Kind.AnnouncesCounts), as pusher_internal:subscription_count
//     when the app enables it, with the count's version
//     (counts.Edges.Versions), so a node that delivered a later count drops
//     an earlier one that arrives after it. A vacated channel announces no
//     count (its subscribers are gone), and a presence channel announces
//     members instead.
//
// No count change's webhook is sent from here: the count scripts log
// occupancy, member and subscription_count webhooks to the app's event log
// in the same atomic unit as the change.
//
// For gate calls, Admission records the call's metrics, appends the
// admission webhooks the app asks for, and tells the nodes holding the
// channel's waiters, on protocol.AdmissionChannel, that the list moved.
//
// Guarantees and limits:
//
//   - Every announcement is best effort, at most once, like every bus
//     event: a failed publish or append is logged and counted, never
//     retried. The counts themselves are exact already.
//   - The rule of what is announced lives here only; callers choose how:
//     Throttle holds back counts of busy channels (Pusher's documented
//     rule), WaitJoined delays counts until the caller's own bus has
//     joined the channels.
//   - Count changes flow one way: a process hands each unit's edges to
//     Flushed (a wsnode's Recorder as its OnFlushed, a cleaner after each
//     reap), which queues them and returns at once; Run, on one goroutine,
//     announces them in the order queued, so one channel's counts go out
//     in order; Drain sends what is left at a stop. An Announcer is safe
//     for concurrent use.
package announce
