// Package httpapi is the headcount HTTP API binary as an embeddable app: the
// signed Pusher HTTP API under /apps/{app_id}/..., answered from the counts
// in Redis (counts.Store) without asking any wsnode, plus the admin server
// (/metrics, /healthz, /readyz).
//
// Guarantees:
//   - Every /apps/ request is checked before anything is read from Redis,
//     and its body is read only once its head has passed: 404 for an
//     unknown app id, 413 for a Content-Length over the cap, 401 (with the
//     reason) for a bad or stale signature or a tampered query (body_md5 is
//     in the signed query, so this needs no body), 403 for a disabled app;
//     then the body is read under the cap (413) and --read-timeout (408)
//     and checked against body_md5 (401). A request refused before its
//     signature proved anything (from its head, or for its body_md5) is
//     answered with Connection: close and closes its connection, so that
//     nobody without the secret keeps connections open behind refusals;
//     GET /up keeps its connection (load balancers). Wrong methods get
//     405, bad channel names and bad info attributes 400. Error bodies are
//     plain text, as Pusher's are.
//   - No connection is held longer than its timeouts: --idle-timeout
//     between requests (default 120 s), --read-timeout for a whole request
//     (30 s), --write-timeout from the end of its headers to the end of its
//     answer (60 s); headers alone get 10 s.
//   - The API port holds at most --max-connections connections at once
//     (lifecycle.ListenCapped), by default the open-file limit less room for
//     the admin port and other files (config.MaxSocketsFor) and for every
//     connection rdb's pools may open (redisConns: every part of the app
//     shares rdb), so /readyz, /metrics and Redis keep working at the cap.
//     At the cap a new connection takes the place of the one that waited
//     longest for a request (a keep-alive connection between requests, or
//     a new one without a request head for a second); when all are busy it
//     is answered 503 with Retry-After and closed. Each is a rate-limited
//     WARN and a metric; accept failures back off instead of spinning.
//   - Counts are exact as of the Redis read: a listing holds only occupied
//     channels and GET /apps/{id}/channels/{name} says occupied:false for a
//     vacant one. A Redis failure is a 503 and never a made-up answer. The
//     one read that may be older than the request is the full listing,
//     shared across replicas for at most --listing-cache-ttl (below).
//   - /readyz is 200 only while Redis answers a ping (checked every
//     second) and the server is not shutting down; headcount_httpapi_ready
//     says the same at each scrape.
//   - No input makes the server panic; a handler bug is a 500 and a log line.
//
// Deliberate choices where the Pusher docs leave room:
//   - info=user_count counts distinct users cluster-wide (a user with sockets
//     on two nodes counts once), from the presence members in Redis. Asking
//     for it on a non-presence channel, or in a listing not limited to
//     presence- channels, is a 400 as Pusher documents.
//   - subscription_count is answered for every channel type, presence
//     included (the docs' example and pusher-http-go treat it so), and is
//     left out for a vacant channel ({"occupied":false}).
//   - info=cache is 400 on a channel that is not a cache channel; on one it
//     adds "cache":{"data":..,"ttl":<seconds left, rounded up>} while an
//     event is cached, occupied or not (the event outlives its
//     subscribers). Other attributes are a 400.
//   - A publish on a cache channel writes the channel's cache in the
//     publish's own pipeline, just before the event's publish (package
//     cache). If that write fails and the publish does not, the request
//     still succeeds (the event was delivered) and the failure is logged
//     and counted in headcount_httpapi_redis_errors_total.
//   - A query parameter given twice is refused with 401: the server would
//     otherwise act on a value other than the one that was signed.
//   - So is a parameter whose decoded key holds '&' or '=' or whose decoded
//     value holds '&' (401 "signature ambiguous"): the unescaped string to
//     sign cannot tell filter_by_prefix=presence-%26info%3Duser_count from
//     filter_by_prefix=presence-&info=user_count, so one signature would
//     serve both. 401 rather than 400 because the request may be perfectly
//     well formed; what fails is that its signature cannot vouch for it.
//     SDKs send values unescaped, where an '&' could not survive anyway, so
//     none of their requests is refused; '=' stays legal in values, as
//     channel names (filter_by_prefix) may hold it.
//
// Beyond Pusher (listings, leaderboard, freshness). Clients that only know
// Pusher's shapes (pusher-http-go, which ignores unknown fields) read every
// response below unchanged:
//   - Leaderboard: GET /apps/{id}/channels?order=subscription_count&limit=N
//     (limit 1..1000, default 100) answers the N busiest channels,
//     {"channels":{"a":{"subscription_count":9},...},"order":["a",...]}:
//     a JSON object has no order, so "order" lists the names busiest first
//     (equal counts in reverse name order, Redis's ZREVRANGE order). One
//     ZREVRANGE on the app's sorted set of global counts: O(log n + N).
//     order cannot be combined with filter_by_prefix or cursor (400).
//   - Rank: info=rank on GET /apps/{id}/channels/{name} adds "rank" (1 =
//     busiest) for an occupied channel: ZREVRANK, O(log n), read in the same
//     atomic script as the count, so rank i is the i-th entry of the
//     leaderboard as of that read.
//   - Paging: limit (1..1000, default 100) and/or cursor page the listing in
//     lexicographic order; a page is {"channels":{...},"next_cursor":"..."}
//     and the last one has no next_cursor. filter_by_prefix and
//     info=user_count work as on the full listing. A walk reads a snapshot of
//     the occupied names taken when it starts (shared by walks starting
//     within 2 s of each other), so count changes cannot reorder it: every
//     channel occupied at the snapshot and still occupied when its page is
//     read is listed exactly once; one vacated meanwhile is skipped; one
//     occupied after the snapshot is not listed. A page may be short (its
//     channels were vacated) while more remain: only a missing next_cursor
//     ends the walk. Pages are O(log n + limit); starting a walk copies the
//     names once, O(n). A snapshot idle for 15 s expires and its cursor gets
//     410 Gone (start again); a cursor that is not ours is a 400.
//   - Shared full listing: the listing without limit, cursor or
//     order is computed once across every replica: the first request takes
//     a lock in Redis (SET NX PX --listing-lock-ttl), reads and encodes the
//     listing and caches it (PX --listing-cache-ttl, longer than the lock);
//     concurrent identical requests on any replica poll with a bounded
//     backoff (1 to 20 ms) and reuse that result. If the computing replica
//     dies, its lock expires and the next waiter computes. A cached listing
//     is served while it is younger than --listing-cache-ttl (default 1 s)
//     and the app still has as many occupied channels as when it was read,
//     so a listing is at most that old and a vacated or newly occupied
//     channel refreshes it at once (unless another changed the other way
//     within the TTL). X-Headcount-Listing says computed, cached or waited;
//     headcount_httpapi_listing_computed_total counts computations and
//     headcount_httpapi_listing_shared_total{source} reuses.
//   - Freshness headers on every count response (listing, leaderboard, page,
//     channel), all measured with the clock of the Redis shard that holds
//     the app (the one nodes stamp their last-seen with; never ours):
//     X-Headcount-Age-Ms (how long before the answer the counts were read: 0
//     except for a shared listing), X-Headcount-Oldest-Heartbeat-Ms (at that
//     read, the age of the oldest last-seen among the app's registered
//     wsnodes), X-Headcount-Nodes (how many) and X-Headcount-Stale-Nodes
//     (how many had not been seen for --stale-after, default 3 s: probably
//     dead, their sockets still counted until the cleaner reaps them). With
//     no stale node, the counts are exact up to the nodes' flush windows
//     plus Age; with one, they may include its sockets for up to the
//     cleaner's dead-after plus a scan interval.
//
// Publishing (POST /apps/{id}/events and /batch_events):
//   - Bodies are parsed after the signature check and refused whole, before
//     anything is published: malformed JSON, a missing name or data, a name
//     over 200 bytes, data that is not a string, a bad channel name, more
//     than 100 channels (app.MaxEventChannelsAtOnce), a batch over 10 items
//     (app.MaxEventBatchSize), a socket_id not matching ^\d+\.\d+$ or an
//     unknown info attribute are 400; data over 10 KB (app.MaxEventPayloadInKb)
//     is 413. A batch item's errors name it ("batch[3]: ..."). #server-to-user-
//     channels are accepted; headcount's internal channels ('#', see
//     protocol.TerminateUserPrefix) are not, so no caller can forge an order.
//   - Each channel is one fanout message (repeated channels once); socket_id
//     becomes the message's ExceptSocket, so the nodes skip that socket.
//   - One Redis round trip per request: every PUBLISH (SPUBLISH on Cluster)
//     and, with info, each channel's ZSCORE (subscription_count) and HLEN
//     (user_count) go in one pipeline (fanout.Bus.PublishBatch with
//     counts.Store.QueueCounts). All of an app's topics and count keys carry
//     its {app} hash tag, so on Cluster that pipeline goes to one master.
//     The counts are therefore read right after the publish, as of the same
//     moment, and cost O(1) per channel with no fan-out to nodes.
//   - info: subscription_count is reported for every channel (0 when
//     vacant), presence included; user_count (distinct users) only for
//     presence channels and silently left out for the others, so a trigger
//     mixing kinds is not refused; nothing for #server-to-user- channels,
//     which are not counted. The response is {} without info,
//     {"channels":{...}} with it, and for a batch {"batch":[...]} aligned by
//     index as soon as any item asks for info (never {"batch":{}}, which
//     pusher-http-go cannot decode).
//   - A publish Redis did not acknowledge is a 503 ("may or may not have
//     been delivered"; it is never sent twice). If the publishes succeeded
//     but a count read failed, the answer is still 200, without that count:
//     a 5xx would invite a retry that publishes the event again.
//
// Users:
//   - GET /apps/{id}/channels/{name}/users lists the distinct members of a
//     presence channel cluster-wide from Redis (sorted); 400 for any other
//     channel type.
//   - POST /apps/{id}/users/{user_id}/terminate_connections publishes one
//     order on the bus channel protocol.TerminateUserChannel(user_id). Every
//     wsnode joins that channel for each socket signed in (pusher:signin) as
//     the user, and leaves it when the socket closes, so Redis routes the
//     order only to nodes holding such sockets; each sends those sockets
//     pusher:error 4009 and closes them with 4009 (pusher-js then does not
//     reconnect). Sockets that are only presence members are not affected,
//     as Pusher documents. Like any event, an order published before a
//     node's subscription reached Redis (a socket signed in a few
//     milliseconds earlier) is missed; calling again is harmless.
//
// Admission (README, Admission; pkg/admission does the atomic work): PUT/DELETE
// /apps/{id}/channels/{name}/capacity, POST/DELETE/GET .../admission, for
// presence channels only (400 otherwise); a capacity is 1 to
// apps.MaxCapacity (400 otherwise). A call that admits or strikes
// someone logs the admission webhooks the app asks for and tells the nodes
// with connected waiters on protocol.AdmissionChannel.
//
// Webhooks: every replica runs a webhook.Deliverer; each (app, URL) is
// delivered by one replica at a time (see pkg/webhook).
//
// Read-only status for the dashboard, signed like the rest: GET
// /apps/{id}/status (nodes with last-seen and connections, the cleaner
// lease), GET /apps/{id}/admission (every limited channel with a list; it
// settles each gate as the per-channel GET does) and GET /apps/{id}/audit
// (counts.Audit, at most every 5 s per process). With --dashboard the
// unsigned pages /dashboard and /demo and their /dashboard/api and
// /demo/api handlers are served too; they sign their API calls on the
// server, so the secret never reaches a browser, but they show app data to
// anyone who reaches --addr: off by default. Against other sites' pages in
// a browser, every one of those routes answers only to a Host that is an
// IP address, localhost, --addr's host or in --dashboard-hosts (403: DNS
// rebinding), refuses an Origin other than the request's own host (403),
// and the demo's POSTs take application/json only (415).
//
// At start and after each reload that changes the apps, a WARN when --addr
// is reachable from other hosts and an app's secret is one published with
// headcount (lifecycle.WarnPublicSecrets).
//
// Request bodies reach the handlers as the signature check read them
// (apiRequest.body), so the cap (1 MiB, 413) applies before any byte is
// parsed and the body is read once from the network; a client announcing
// 100 MB is answered 413 without a byte of it read, and one sending a
// longer body than it announced is cut after about the cap. Someone
// without the app's secret cannot make the server wait for a body at all.
//
// An App is safe for concurrent use; Run is called once, Stop any number of
// times from any goroutine.
package httpapi
