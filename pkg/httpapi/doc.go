// Package httpapi is the headcount HTTP API binary as an embeddable app: the
// signed Pusher HTTP API under /apps/{app_id}/..., answered from the counts
// in Redis (counts.Store, counts.Listings) without asking any wsnode, its
// publishes sent on a fanout.Bus, a webhook.Deliverer, and the admin server
// (/metrics, /healthz, /readyz); with --dashboard, package dashboard's pages
// on the API port too. docs/REFERENCE.md ("HTTP API") specifies
// every route and answer beyond docs/PUSHER.md; docs/INTERNALS.md
// ("httpapi") follows a request through the package.
//
// Guarantees:
//   - Every /apps/ request is checked (app, size, signature, enabled)
//     before anything is read from Redis or from its body, and one refused
//     before its signature proved anything closes its connection: nobody
//     without an app's secret makes the server read a body or keep a
//     connection.
//   - An app id not served, or served disabled or without the request's
//     auth_key, is looked up in the apps' source (appreload.Reloader.Lookup)
//     before the request is refused: an app inserted, enabled or given a
//     key a moment ago answers its first request. A request of an app
//     served never waits for such a read.
//   - A count is exact as of the Redis read that answers it, and a Redis
//     failure is a 503, never a made-up answer; only a shared full listing
//     is older, by at most --listing-cache-ttl.
//   - A publish is never sent twice: one Redis did not acknowledge is a 503
//     (it may or may not have gone out), and one it acknowledged is a 200,
//     even when a count read or a cache write after it failed. On a
//     channel with a history (apps field history) it is recorded in the
//     unit that sends it, and GET .../events reads it back (package
//     history), saying when what followed a serial is no longer held.
//   - No connection is held past its timeouts, and the API port holds at
//     most --max-connections, so Redis and the admin port keep working at
//     the cap. /readyz is 200 only while Redis answers a ping, and
//     headcount_httpapi_ready says the same at each scrape.
//   - No input makes the server panic; a handler bug is a 500 and a log
//     line.
//
// An App is safe for concurrent use; Run is called once, Stop any number of
// times from any goroutine.
package httpapi
