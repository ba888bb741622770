// Package eventlog owns each app's event log: the Redis stream webhook
// deliverers read, its key and its index's, the names of the events it
// carries, its entry cap and byte budget, appending to it, and markers.
//
// Two kinds of writer append. The count scripts (package counts) log the
// occupancy, member and count changes of a count change in the same
// atomic unit as the change, by prepending this package's Lua (Prelude)
// to their own scripts and declaring Key and IndexKey among their keys;
// every other producer (client events, cache misses, admission events)
// calls Log.Append. Both go through the same Lua (scripts/lib.lua), so every
// entry carries the byte offset that makes the log's size a difference of
// two reads, and every append is held to the log's byte budget and entry
// cap.
//
// Guarantees:
//
//   - Every append is one atomic script on the log's shard, so the byte
//     budget holds however many processes append at once: a log never
//     holds more than its budget. An event that does not fit is refused
//     and counted in the index; the next event let in is preceded by an
//     EventsDropped notice with how many went missing since when.
//   - The count scripts log changes as markers: an entry saying a state
//     (a channel's occupancy, a member, a channel's count) changed, whose
//     event a deliverer decides when it claims it (Log.Claim), from the
//     state in Redis then. While a state's marker is unclaimed its further
//     changes log nothing, so changes that cancel out or are superseded
//     cost no entry, and a receiver that is behind leaves at most one
//     unclaimed marker per channel, member and kind.
//   - A claimed marker of a member or a count whose channel's occupancy
//     changed after it, unclaimed, is logged again after that change
//     rather than told first, so nothing about a channel is told after its
//     channel_vacated until its channel_occupied.
//   - Sweep forgets index slots whose marker was trimmed unclaimed, so the
//     index does not outgrow the log for long.
//
// A Log is a value naming one app's log; its methods are safe for
// concurrent use.
package eventlog
