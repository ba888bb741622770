// Package wsnode is the WebSocket node: it speaks Pusher protocol v7 on
// /app/{key} (public, private, private-encrypted, presence, cache and
// #server-to-user- channels, pusher:signin, client events), reports every
// subscription, presence member and connection to a counts.Recorder, which
// publishes them to Redis as this node's contribution, and exchanges events
// with the other nodes through a fanout.Bus.
//
// The WebSocket port is served by a lean HTTP front (package wsfront),
// not net/http's server: it reads each request head into a pooled buffer,
// upgrades GET /app/{key} through websocket.Accept and answers anything
// else with an HTTP error and a close; wsfront's doc says what it refuses
// and how an answer reaches a client still sending. The upgrade hands the
// node a socketConn (sockread.go, wire.go), which holds the 101 until the
// first frame and keeps an idle socket's buffers small.
//
// Socket cap: the port holds at most --max-sockets connections at once,
// those still sending their head and upgraded sockets alike; a connection
// past it is answered with a fixed 503 and closed, counted in
// errors_total{reason="socket_cap"}. The default cap is the open-file limit
// less max(64, a tenth of it), so one client cannot take the descriptors
// the node needs for Redis and its admin port. The front's refusals count
// as errors_total{reason="handshake_refused"}, its failed accepts as
// reason="accept".
//
// Client messages: one over the read limit (16 KiB) closes its socket with
// 1009, a text message that is not UTF-8 with 1007. coder/websocket does
// not check UTF-8, so the node checks each text message once its
// fragments are joined: no client can relay bytes a browser would drop its
// connection for.
//
// Concurrency: each socket is served by exactly one goroutine of its own,
// started by the handshake's goroutine (which then returns, so the
// request's state is freed); it reads frames and alone
// owns the socket's subscriptions, signed-in user and rate limiter. Nothing
// is written to a socket directly after the handshake: replies and
// deliveries go through the socket's bounded send queue, in the order they
// were queued, and a fixed pool of writer goroutines, one per core,
// drains the sockets that have frames. A writer never waits for a client:
// when a socket's kernel buffer is full, the rest of its batch goes to a
// goroutine of the socket's own, bounded by the write timeout
// (headcount_wsnode_write_waits_total). Deliveries and replies each have a budget of 1,024
// frames (more than a socket's channels) and 256 KiB in the queue. Queueing a delivery never blocks, so the bus
// goroutine and other sockets never wait for one client: a socket whose
// deliveries overflow is a slow consumer and is disconnected (close 4100 so
// pusher-js backs off a second, or cut at once if a write to it is stuck),
// counted in headcount_wsnode_slow_consumers_total. Replies to the socket's
// own frames never cut it: its handler waits for room instead, so a burst
// of subscribes (pusher-js sends them all at once on connect) only slows
// the socket's reads, and a client that reads none of its replies is cut by
// the write timeout. A delivered message is encoded and framed once, and
// the same bytes are written to every local subscriber, one write(2) each
// (wire.go: server frames are unmasked, so they need no per-socket copy).
//
// There are no per-socket timers: one sweeper goroutine advances a coarse
// clock and closes sockets silent past the idle timeout (close 4201), stuck
// in a write past the write timeout, or, for apps with
// enableUserAuthentication, not authorized (signed in, or subscribed to a
// private or presence channel) within --user-auth-timeout (pusher:error and
// close 4009, which pusher-js does not reconnect from). The client-event rate limit (the
// app's maxClientEventsPerSecond, 10 by default, per socket, pusher:error
// 4301 beyond) is a token bucket on the same clock, and so is the frame
// limit (frameBudget: a burst of three frames per channel a connection
// may hold at most, then the client events and 10 more per second; beyond it
// pusher:error and close 4100, so pusher-js backs off a second). A socket
// holds at most the app's maxChannelsPerConnection channels (100 by
// default), and a subscribe that would open a channel counts against the
// app's maxChannels, occupied cluster-wide, from a view each node reads at
// most once a second (appchannels.go). A repeated subscribe of a socket
// gets Pusher's pusher:error "Existing subscription to channel", not a
// second answer. An upgrade whose Origin
// the app's allowedOrigins do not allow is refused with 403 before it
// becomes a socket. The socket registry and the channel index (channel ->
// local subscribers) are sharded, each shard under its own lock. App
// methods are safe for concurrent use; Run may be called once.
//
// Presence: a socket's join and leave are recorded with AddMember; the
// member_added and member_removed events are published (through the bus, to
// every node) only from the cluster-wide 0->1 and 1->0 edges the recorder
// reports after a flush (by package announce, which the cleaner's reap
// uses too), so a user with sockets on several nodes is added once and
// removed once. A presence subscribe first passes the admission gate
// (admission.Gate.Join), which holds the user's seat until this node's
// flush records them, so maxPresenceMembersPerChannel is exact across nodes;
// only a user it lets in reads the member list, and subscription_succeeded
// lists the cluster's members (Redis) merged with this node's members not
// flushed yet. Channel-data
// signatures are over socket_id:channel:channel_data as received; a
// presence subscription without channel_data takes its member from the
// connection's signin and is signed over socket_id:channel.
//
// terminate_connections: a socket that signs in joins, like a subscription
// but uncounted, the internal channel protocol.TerminateUserChannel(user)
// (in the channel index and on the bus, ref-counted per socket; closing the
// socket leaves it). A message the HTTP API publishes there is not relayed:
// deliver closes each of the user's local sockets instead, with
// pusher:error 4009 and close code 4009, on a short goroutine bounded like
// the node's other closes. No goroutine or timer per socket is added.
//
// Watchlist events (watchlist.go): a signed-in socket is a member of the
// app's protocol.SignedInChannel (recorded like a presence member, without
// a channel count) until it closes, so a user's first signed-in socket in
// the cluster and their last are member edges, announced on
// protocol.WatchUserChannel(user). A socket whose signin carried a
// watchlist joins those channels for its users (index and bus, as above),
// waits (bounded) for Redis to confirm the joins, reads who is online, and
// queues that status before any edge; edges that came meanwhile win over
// the read, since they may be newer. Frames of one socket's watchlist are
// queued in order under its watchlist's lock.
//
// Cache channels (cache.go): right after a new subscription's
// subscription_succeeded, the socket's goroutine waits until the bus's
// subscription to the channel is confirmed, reads the channel's cached
// event from Redis (package cache) and, on a hit, syncs with the bus
// (fanout.Bus.Sync) so every live event published before the read has been
// queued; then it queues the cached event, or pusher:cache_miss (queueing
// the cache_miss webhook on the app's Producer when the read says this
// miss is the one to report). A delivery on the channel queued for the
// socket before that reply marks the wait, under the socket's queue lock,
// and the cached event is then dropped: the client has it or a newer one.
// The wait costs one pointer per socket.
//
// Delivery is at most once, as with Pusher: an event published before a
// node's bus subscription to the channel reached Redis, or during a Redis
// outage, is lost for that node's sockets; counts are never lost.
//
// The apps are reloaded live (package appreload). A reload that removes or
// disables an app closes its sockets on this node with 4001 or 4003, as a
// connect would be refused now; a socket of an app that changed otherwise
// gets the new *App for what it does next, nothing granted being taken
// back; sockets of unchanged apps are not touched (apps.go).
//
// At start and after each reload that changes the apps, a WARN when --addr
// is reachable from other hosts and an app's secret is one published with
// headcount (lifecycle.WarnPublicSecrets).
//
// Shutdown (ctx cancelled or Stop): readiness goes false, the listener
// closes, sockets are closed with code 4200 spread over the drain window,
// the drained sockets' changes are flushed and their presence leaves
// announced, and the node's contribution is removed from Redis. Run then
// returns nil. An App keeps lifecycle.Service: Run is called once, Stop any
// number of times from any goroutine, and a Stop before Run frees the
// listeners and the Redis client New took.
package wsnode
