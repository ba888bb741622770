// Package webhook delivers Pusher's webhooks (channel_occupied/_vacated,
// member_added/_removed, client_event, subscription_count, cache_miss) and
// headcount's admission_admitted/_dropped and events_dropped, at least
// once, from a durable per-app log.
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
//     acknowledged (XAUTOCLAIM). An event is acknowledged only once
//     delivered or given up, so nothing is lost; one may be sent twice.
//   - Events of one channel are posted in log order, one request at a
//     time; other channels' go on meanwhile (up to 16 requests in flight
//     per webhook).
//   - Without a batch setting a request carries one event. With one
//     (apps.WebhookBatch), a request carries up to Size events in log
//     order, several of one channel included; a request not full waits
//     until its oldest event was read MaxWait ago. A failed request's events
//     are retried together after one backoff; none is acknowledged before a
//     request carrying it succeeded, so batching changes neither the order
//     within a channel nor at-least-once delivery.
//   - A webhook gets only the event types it lists and, with a filter,
//     only events whose channel starts and ends as the filter says
//     (soketi's channel_name_starts_with / _ends_with); the others are
//     acknowledged for it at once, and a client event no webhook of its
//     app wants is not logged at all (Producer.Enqueue). Its headers are sent with each request;
//     apps refuses those the signature or framing depends on.
//   - channel_vacated and member_removed wait the debounce (3 s) before
//     they are claimed, so a channel or member that comes back within it
//     (a page reload) sends nothing.
//   - A failed post (no answer in 5 s, or not 2xx) is retried with
//     exponential backoff (0.5 s doubling to 30 s, jittered) until the event
//     is RetryWindow (5 min) old; then it is dropped with an error log line
//     and headcount_webhook_dropped_total, never silently. The lease holder
//     reports its backlog (headcount_webhook_queue_depth, and the creation
//     time of the oldest pending event), and stops when it loses the lease.
//   - Redirects are never followed, whatever Options.Client says: a 3xx is
//     a failed attempt like any non-2xx, and a warning (at most one a
//     minute per webhook) names its Location. Following it would let the
//     receiver send the deliverer's signed POSTs to any address it can
//     reach, internal ones included.
//   - Requests are signed as Pusher signs them: Content-Type exactly
//     application/json, X-Pusher-Key, X-Pusher-Signature = hex
//     HMAC-SHA256(secret, body), body {"time_ms": creation of the first
//     event, "events": [...]}.
//   - The log is trimmed below what every webhook of the app has finished,
//     and capped at about a million entries in case nothing delivers.
//   - It is also bounded by bytes (LogBudget: the app's
//     maxWebhookLogSizeInMb, 64 MiB by default): every event is held to
//     it, atomically across processes, because clients choose the size
//     and rate of client events (up to 10 KB each), of cache misses, and,
//     through the channels they subscribe to, of occupancy changes and
//     counts. Refusals are counted in the log's index and reported by the
//     replica that trims the log (headcount_webhook_log_dropped_total, and
//     an error log line at most once a minute per app); webhooks that ask
//     for events_dropped get a notice where the events went missing once
//     there is room. Trimming delivered entries frees the budget at once,
//     and the trimming replica reports the log's size in
//     headcount_webhook_log_bytes.
package webhook
