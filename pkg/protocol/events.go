package protocol

// Event names of protocol v7.
const (
	EventConnectionEstablished = "pusher:connection_established"
	EventError                 = "pusher:error"
	EventPing                  = "pusher:ping"
	EventPong                  = "pusher:pong"
	EventSubscribe             = "pusher:subscribe"
	EventUnsubscribe           = "pusher:unsubscribe"
	EventSubscriptionError     = "pusher:subscription_error"
	EventSignin                = "pusher:signin"
	EventSigninSuccess         = "pusher:signin_success"
	EventCacheMiss             = "pusher:cache_miss"

	EventSubscriptionSucceeded = "pusher_internal:subscription_succeeded"
	EventSubscriptionCount     = "pusher_internal:subscription_count"
	EventMemberAdded           = "pusher_internal:member_added"
	EventMemberRemoved         = "pusher_internal:member_removed"
	// EventWatchlistEvents tells a signed-in socket that users of its
	// watchlist came online or went offline (AppendWatchlistEvents).
	EventWatchlistEvents = "pusher_internal:watchlist_events"

	// ClientEventPrefix starts the name of every client event.
	ClientEventPrefix = "client-"
)

// Names of the events inside pusher_internal:watchlist_events, which
// pusher-js emits on pusher.user.watchlist.
const (
	WatchlistOnline  = "online"
	WatchlistOffline = "offline"
)

// MaxWatchlist is the most user ids a signin's watchlist may hold
// (Pusher's limit); the excess is refused with CodeWatchlistLimit.
const MaxWatchlist = 100

// ActivityTimeout is the activity_timeout sent in connection_established, in
// seconds: Pusher's own value. pusher-js pings after this much silence.
const ActivityTimeout = 120

// EventResumeFailed tells a resumed subscriber that events it missed are
// no longer in the channel's history (wsnode's resume): data
// {"lost_from": serial or null, "lost_to": serial or null}.
const EventResumeFailed = "headcount:resume_failed"
