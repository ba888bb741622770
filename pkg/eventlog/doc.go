// Package eventlog owns each app's event log: the Redis stream webhook
// deliverers read, its key, the names of the events it carries, its entry
// cap, and appending to it.
//
// Two kinds of writer append. The count scripts (package counts) append
// the occupancy and member events of a count change in the same atomic
// unit as the change, by prepending Lua to their own scripts and declaring
// Key among their keys; every other producer (client events, subscription
// counts, admission events) calls Log.Append. Both go through the same Lua
// (scripts/lib.lua), so every entry carries the byte offset that makes the
// log's size a difference of two reads, and every append enforces
// MaxEntries.
//
// A Log is a value naming one app's log; its methods are safe for
// concurrent use, and every append is one atomic script on the log's
// shard, so the byte budget of bounded entries holds however many
// processes append at once.
package eventlog
