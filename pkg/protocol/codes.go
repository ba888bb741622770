package protocol

import "strconv"

// Code is a Pusher error code, sent inside pusher:error and, for 4000-4299,
// as a WebSocket close code. pusher-js acts on the close code: 4000-4099
// gives up, 4100-4199 backs off, 4200-4299 reconnects at once (protocol.ts
// getCloseAction). Zero means no code and is sent as null.
type Code int

// Codes from the Pusher protocol docs.
const (
	// CodeNone is sent as "code":null: the request failed, the connection is fine.
	CodeNone Code = 0

	CodeSSLOnly             Code = 4000
	CodeAppNotFound         Code = 4001
	CodeAppDisabled         Code = 4003
	CodeOverConnectionQuota Code = 4004
	CodePathNotFound        Code = 4005
	CodeInvalidVersion      Code = 4006
	CodeUnsupportedProtocol Code = 4007
	// CodeNoProtocol is for a connection without ?protocol=; pusher-js
	// treats it like 4007 (refused, no reconnect).
	CodeNoProtocol   Code = 4008
	CodeUnauthorized Code = 4009

	CodeOverCapacity Code = 4100

	// CodeReconnect asks pusher-js to reconnect at once: used when draining.
	CodeReconnect       Code = 4200
	CodePongNotReceived Code = 4201
	CodeInactivity      Code = 4202

	// 43xx codes go only inside pusher:error, never as close codes: pusher-js
	// would give up for good.
	CodeClientEventRateLimit Code = 4301
	CodeWatchlistLimit       Code = 4302
)

// Error is an error the client is told about in a pusher:error frame.
type Error struct {
	// Code is sent as the error's code; CodeNone is sent as null.
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Code == CodeNone {
		return e.Message
	}
	return strconv.Itoa(int(e.Code)) + ": " + e.Message
}

// AppendTo appends the pusher:error frame for e to dst.
func (e *Error) AppendTo(dst []byte) []byte { return AppendError(dst, e.Code, e.Message) }

// Subscription error types sent in pusher:subscription_error.
const (
	// SubscriptionUnsupported: the server does not serve this kind of channel.
	SubscriptionUnsupported = "UnsupportedChannel"
	// SubscriptionLimit: a limit was reached (channels per connection,
	// presence members, user id or user_info size).
	SubscriptionLimit = "LimitReached"
	// SubscriptionAuth: the auth value does not verify (status 401), as
	// soketi sends it and pusher-js reports it.
	SubscriptionAuth = "AuthError"
	// SubscriptionInvalid: channel_data is malformed (status 400).
	SubscriptionInvalid = "InvalidChannelData"
	// SubscriptionServer: the server could not check the subscription
	// (Redis unreachable; status 503). Retrying later may work.
	SubscriptionServer = "ServerError"
	// SubscriptionAdmissionRequired: a capacity-limited presence channel
	// and the user holds no slot on it (status 403); see AdmissionPrefix.
	SubscriptionAdmissionRequired = "AdmissionRequired"
)

// SubscriptionError is a refused subscription, sent as
// pusher:subscription_error on the channel (soketi's form), which pusher-js
// re-emits on the channel for app code; the connection stays open.
type SubscriptionError struct {
	Channel string
	// Type names the reason, e.g. SubscriptionUnsupported.
	Type    string
	Message string
	// Status is an HTTP-like status, as pusher-js reports for auth failures.
	Status int
}

func (e *SubscriptionError) Error() string {
	return "subscription to " + e.Channel + " refused: " + e.Type + ": " + e.Message
}

// AppendTo appends the pusher:subscription_error frame for e to dst.
func (e *SubscriptionError) AppendTo(dst []byte) []byte {
	var scratch [256]byte
	inner := append(scratch[:0], `{"type":`...)
	inner = appendString(inner, e.Type)
	inner = append(inner, `,"error":`...)
	inner = appendString(inner, e.Message)
	inner = append(inner, `,"status":`...)
	inner = strconv.AppendInt(inner, int64(e.Status), 10)
	inner = append(inner, '}')
	return appendFrame(dst, EventSubscriptionError, e.Channel, inner, "")
}
