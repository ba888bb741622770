// Package counts keeps exact, crash-proof subscription counts in Redis. Per
// app it holds each wsnode's contribution (its sockets per channel, per
// presence member and in all), the global counts (the sum of the
// contributions) and each node's last-seen, by Redis's clock.
// docs/INTERNALS.md ("counts") walks through its keys and scripts.
//
// Guarantees:
//   - Every count change is one atomic unit on the app's slot: a
//     contribution and the globals move together (with the node's
//     last-seen, on its own writes), and the unit logs the webhook markers
//     of the edges it made. So the globals always equal the sum of the
//     registered contributions and of the reaps under way.
//   - No count goes below zero; an entry that reaches zero is removed in the
//     same unit.
//   - Reads are exact once a node is known dead: every count Store and
//     Listings read (a channel's, a listing's, a page's, a publish's,
//     users, Members, connections, and admission's seats through ExactPrelude)
//     leaves out what the reaps under way still hold, read in the same
//     script as the global it corrects, from the reap's first unit on,
//     however long its slices take (exact.go). So do a channel's rank,
//     the leaderboard's choice of entries and ChannelLoad, within bounds
//     that keep their work from growing with a node: exact while each reap
//     holds at most reapWindow fields (the leaderboard: topWindow of the
//     first channels); beyond, a rank may place a channel lower, the load
//     count more channels and the leaderboard come short, never the other
//     way. A retire's reap, a live node's republish, stays counted while
//     its node is registered: a node that dies mid-republish leaves the
//     reads with its retire, from its own reap's first unit on. Some
//     reads do not follow this: MembersAt and AreMembers read the globals,
//     as the member edges they pair with are of the globals.
//   - A node reaped while alive, or whose Redis lost its data, learns it from
//     its next write or heartbeat and republishes its whole state. An epoch
//     fences each republish: a unit sent before it that Redis runs after it
//     is refused. CompleteKey says from when Redis holds every live node's
//     contribution: absent until a node registers, and two heartbeats
//     ahead of a republish of a node that found its contribution gone.
//   - Every member edge carries its unit's version, and MembersAt reads a
//     member list with the version it holds.
//   - No unit grows with an app: a reap, a republish and an audit run in
//     units of at most Store.SliceSize fields (a reap's slices twice
//     that), and two cleaners draining one reap subtract each field once.
//   - A node's admin address (RecorderOptions.Address) lives beside its
//     node-level last-seen and goes with it: ForgetNode deletes it and
//     WatchNodes drops any whose node left, so none outlives its node.
//   - A node's Liveness never closes a silent connection before a new
//     subscription is confirmed, so a partition or a pause never makes a
//     live node's liveness subscription vanish; its process's death does.
//
// The scripts live in scripts/, one file each, with a header stating
// their KEYS, ARGV and the preludes they use; scripts.go alone builds them,
// from a table of each script's file and its preludes (exactlib.lua,
// lib.lua, freshlib.lua, sources.lua, the statuses, and luascript.NowMs
// and eventlog.Prelude from elsewhere). TestScripts checks, without Redis,
// that each script's preludes declare every name it reads, that its
// header names them, and that no file under scripts/ is left out
// (pkg/luascript).
//
// A wsnode's Recorder takes changes (Add, AddMember, AddConnections),
// coalesces and flushes them; one goroutine runs Recorder.Run, and one
// Liveness.Run. The cleaner reaps and audits through Store; httpapi reads
// through Store and Listings, whose answers say how fresh they are. Store
// and Listings are safe for concurrent use; Recorder.Add is too, and never
// blocks on Redis.
package counts
