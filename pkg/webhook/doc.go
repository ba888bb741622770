// Package webhook delivers Pusher's webhooks (channel_occupied/_vacated,
// member_added/_removed, client_event, subscription_count, cache_miss) and
// headcount's admission_admitted/_dropped and events_dropped, at least
// once, from a durable per-app log. docs/REFERENCE.md ("Webhooks") says
// what a receiver gets, and when.
//
// Guarantees:
//
//   - Occupancy, member and subscription_count events are logged to the
//     app's event log (eventlog.Key, a Redis stream) by the count scripts
//     themselves, in the same atomic unit as the count change, on a
//     wsnode's flush and on the cleaner's reap alike: a node's death
//     produces exactly the events its sockets' leaving would have, and no
//     change is logged without its count or counted without its event.
//     They are markers (package eventlog): each is claimed just before its
//     first attempt, which decides its event from the state in Redis then,
//     so a change undone before it is posted is not posted, and a count is
//     the count at posting. Other producers (client events, admission)
//     append with Append, or through a Producer (client events and cache
//     misses, from wsnodes).
//   - Each (app, webhook URL) is a consumer group on the log, delivered by
//     one replica at a time, the holder of its lease; every httpapi replica
//     contends, so the work spreads and a dead holder's webhooks are taken
//     over within a lease TTL, with the events it had read and not
//     acknowledged (XAUTOCLAIM). While it holds the lease, the holder also
//     takes back, within about a second, what the group holds pending and
//     it does not: events a read took whose reply was lost (Redis
//     restarted or failed over mid-read), acknowledgements a failover
//     lost, and events a deposed holder read after the takeover, once idle
//     longer than it can still be posting them (LeaseTTL + finishGrace);
//     it never queues an event twice. An event is acknowledged only once
//     delivered or given up, so nothing is lost; one may be sent twice.
//     A holding that ends while its replica lives (an app reload restarts
//     its targets; a lease lost) lets the posts under way finish, for up
//     to finishGrace, and acknowledges them, so it sends nothing twice.
//   - Events of one channel are posted in log order, one request at a
//     time; a lost reply's events are taken back before any read after
//     them is posted, but a deposed holder's may come after later ones of
//     their channel. Batching (apps.WebhookBatch) changes neither that
//     order nor at-least-once delivery: a failed request's events are
//     retried together, and none is acknowledged before a request
//     carrying it succeeded.
//   - A webhook gets only the event types it lists and, with a filter, the
//     channels it names; the others are acknowledged for it at once, and a
//     client event no webhook of its app wants is not logged at all
//     (Producer.Enqueue). apps refuses the headers the signature or framing
//     depends on.
//   - channel_vacated and member_removed wait the debounce (3 s) before
//     they are claimed, so a channel or member that comes back within it
//     (a page reload) sends nothing.
//   - A failed post is retried until the event is RetryWindow old; then it
//     is dropped with an error log line and a metric, never silently. The
//     lease holder reports its backlog (depth, and the oldest pending
//     event's creation time) and stops reporting when it loses the lease.
//   - Redirects are never followed, whatever Options.Client says: the
//     receiver could otherwise send the deliverer's signed POSTs to any
//     address it can reach, internal ones included.
//   - The log is trimmed below what every webhook of the app has finished,
//     capped at about a million entries, and held to a byte budget
//     (LogBudget) atomically across processes, since clients choose the
//     size and rate of what it holds. Trimming delivered entries frees the
//     budget at once; refusals are counted, reported by the replica that
//     trims the log, and told to the webhooks that ask for events_dropped.
package webhook
