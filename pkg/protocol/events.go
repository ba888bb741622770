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

	// ClientEventPrefix starts the name of every client event.
	ClientEventPrefix = "client-"
)

// ActivityTimeout is the activity_timeout sent in connection_established, in
// seconds: Pusher's own value. pusher-js pings after this much silence.
const ActivityTimeout = 120
