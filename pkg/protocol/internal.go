package protocol

// TerminateUserPrefix starts the internal bus channel that carries
// terminate_connections for one user between the HTTP API and the nodes:
// TerminateUserPrefix + user id. Every node joins it for each socket signed
// in (pusher:signin) as that user, so Redis routes the order only to nodes
// holding such sockets.
//
// The leading '#' (and no "#server-to-user-") makes ValidateChannelName
// refuse it, so no client can subscribe to it and no HTTP API caller can
// publish on it: only the terminate_connections endpoint does.
const TerminateUserPrefix = "#headcount-terminate-user-"

// TerminateUserChannel is the internal bus channel of user's terminate orders.
func TerminateUserChannel(user string) string { return TerminateUserPrefix + user }

// AdmissionPrefix starts the internal bus channel that tells nodes a
// capacity-limited channel's waiting list moved (someone admitted, struck
// or gone): AdmissionPrefix + channel name. A node joins it while it holds
// sockets waiting for that channel, and then checks where each stands.
// Refused to clients and HTTP API callers for the same reason as
// TerminateUserPrefix.
const AdmissionPrefix = "#headcount-admission-"

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
