package protocol

// InternalPrefix starts the name of every channel the server keeps for
// itself: the internal bus channels below and SignedInChannel. The leading
// '#' (and no "#server-to-user-") makes ValidateChannelNameMax refuse them, so
// no client can subscribe to one and no HTTP API caller can publish on or
// read one; ChannelKind makes them KindInternal.
const InternalPrefix = "#headcount-"

// SignedInChannel is the internal presence-like channel of each app whose
// members are the users signed in (pusher:signin) on any node: a user's
// first signed-in socket in the cluster is its member_added edge
// (online), their last socket's end, or the reap of the node that held it,
// its member_removed edge (offline). It has members but no subscription
// count (KindInternal), so it never shows in channel listings, counts or
// webhooks; its edges go out on WatchUserChannel instead.
const SignedInChannel = InternalPrefix + "signed-in"

// WatchUserPrefix starts the internal bus channel that carries one user's
// online and offline edges to the nodes holding sockets that watch the
// user (a signin's watchlist): WatchUserPrefix + user id. A node joins it
// while any of its sockets watches the user. The messages' events are
// WatchlistOnline and WatchlistOffline.
const WatchUserPrefix = InternalPrefix + "watch-user-"

// WatchUserChannel is the internal bus channel of user's online status.
func WatchUserChannel(user string) string { return WatchUserPrefix + user }

// TerminateUserPrefix starts the internal bus channel that carries
// terminate_connections for one user between the HTTP API and the nodes:
// TerminateUserPrefix + user id. Every node joins it for each socket signed
// in (pusher:signin) as that user, so Redis routes the order only to nodes
// holding such sockets.
//
// The leading '#' (and no "#server-to-user-") makes ValidateChannelNameMax
// refuse it, so no client can subscribe to it and no HTTP API caller can
// publish on it: only the terminate_connections endpoint does.
const TerminateUserPrefix = InternalPrefix + "terminate-user-"

// TerminateUserChannel is the internal bus channel of user's terminate orders.
func TerminateUserChannel(user string) string { return TerminateUserPrefix + user }

// AdmissionPrefix starts the internal bus channel that tells nodes a
// capacity-limited channel's waiting list moved (someone admitted, struck
// or gone): AdmissionPrefix + channel name. A node joins it while it holds
// sockets waiting for that channel, and then checks where each stands.
// Refused to clients and HTTP API callers for the same reason as
// TerminateUserPrefix.
const AdmissionPrefix = InternalPrefix + "admission-"

// AdmissionChannel is the internal bus channel of channel's waiting list.
func AdmissionChannel(channel string) string { return AdmissionPrefix + channel }

// Events a socket waiting for a capacity-limited presence channel receives
// on that channel (after its subscription was refused with
// AdmissionRequired), so a browser needs no polling:
//
//	headcount:admission_waiting   {"position": P, "waiting": W}  place changed
//	headcount:admission_admitted  {"expires_in": S}              subscribe again within S seconds
//	headcount:admission_dropped   {}                             no longer on the list
const (
	EventAdmissionWaiting  = "headcount:admission_waiting"
	EventAdmissionAdmitted = "headcount:admission_admitted"
	EventAdmissionDropped  = "headcount:admission_dropped"
)
