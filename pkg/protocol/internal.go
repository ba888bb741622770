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
