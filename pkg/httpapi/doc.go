// Package httpapi is the headcount HTTP API binary as an embeddable app: the
// signed Pusher HTTP API under /apps/{app_id}/..., answered from the counts
// in Redis (counts.Store) without asking any wsnode, plus the admin server
// (/metrics, /healthz, /readyz).
//
// Guarantees:
//   - Every /apps/ request is checked before anything is read from Redis:
//     404 for an unknown app id, 401 (with the reason) for a bad or stale
//     signature, a tampered query or a tampered body, then 403 for a
//     disabled app. The body is size-capped (413) before it is read and
//     hashed. Wrong methods get 405, bad channel names and bad info
//     attributes 400. Error bodies are plain text, as Pusher's are.
//   - Counts are exact as of the Redis read: a listing holds only occupied
//     channels and GET /apps/{id}/channels/{name} says occupied:false for a
//     vacant one. A Redis failure is a 503 and never a made-up answer.
//   - /readyz is 200 only while Redis answers a ping (checked every
//     second) and the server is not shutting down.
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
//   - info=cache is 400 on a channel that is not a cache channel and 501 on
//     one (cache channels are not implemented); other attributes are a 400.
//   - A query parameter given twice is refused with 401: the server would
//     otherwise act on a value other than the one that was signed.
//
// An App is safe for concurrent use; Run is called once, Stop any number of
// times from any goroutine.
package httpapi
