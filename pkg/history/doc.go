// Package history keeps the recent events of the channels an app's
// history field names (apps.History): a Redis stream per channel whose
// ids are the events' serials, read back by the last n (Last) or after a
// serial (Since), and held to the channel's events and seconds and to a
// byte budget per app.
//
// Guarantees:
//
//   - Serial order is delivery order: an event is recorded and published
//     by one script (PublishCmd, scripts/publish.lua) on the channel's
//     shard, the serial appended to the payload every node receives, so
//     the order in which any subscriber receives a channel's events is the
//     order of their serials, whoever published them.
//   - A channel without a rule never touches a stream: its events are
//     published as before (package fanout decides).
//   - Bounded work: a publish appends one entry, trims at most the
//     channel's events + 1 entries, and removes at most EvictPerPublish
//     for the budget; a stream's key expires after the channel's seconds
//     without an event, so an idle channel leaves nothing.
//   - Byte budget: an app's histories hold about Budget bytes of events
//     (names, data, user ids), counted exactly as the webhook event log
//     counts itself, from offsets its entries record. A publish that finds
//     the app over budget removes the entries closest to expiring, up to
//     EvictPerPublish, so the app's histories exceed the budget by at most
//     the events published since they were last under it; each removal is
//     counted in headcount_history_dropped_total{app,reason="budget"} and
//     logged, rate limited.
//   - Lost is said, never silent: Since reports when events that followed
//     the serial asked for are no longer held (Page.Lost), from the
//     stream's largest removed id (and, for a stream started anew, its
//     first), so a gap is told apart from a quiet channel.
//
// An entry older than its channel's seconds is trimmed by the next
// publish on the channel, or goes with the whole stream when the channel
// stays idle that long; until then, reads may return it.
package history
