// Package dashboard serves the live dashboard (/dashboard) and the demo
// room (/demo) from the signed HTTP API. httpapi registers it on its own
// mux with --dashboard:
//
//	dashboard.Register(mux, dashboard.Options{API: routes, Apps: reg,
//		DemoWS: "127.0.0.1:6001", Hosts: []string{"dash.example.com"}})
//
// An app id the dashboard names that httpapi does not serve yet is looked
// up in the apps' source first (Options.Lookup), as the API's own requests
// are.
//
// The pages' handlers (/dashboard/api/, /demo/api/) sign each request they
// need with the app's own key and secret, as a Pusher server SDK would,
// and run it through Options.API in-process: the dashboard reads what any
// signed client of the API reads, through the same checks, rate limits and
// metrics, and never reads Redis itself. docs/REFERENCE.md ("Status routes
// and the dashboard") lists what they serve.
//
// Guarantees:
//   - No app's secret reaches a browser: only keys, counts, members and
//     admission state do, to anyone who reaches the API port. That is why
//     --dashboard is off by default.
//   - Against other sites' pages, every route answers only to a Host that
//     is an IP address, localhost, *.localhost or a name in Options.Hosts
//     (403, against DNS rebinding), refuses an Origin other than the
//     request's own host (403), and its POSTs take application/json only
//     (415).
//   - The demo room signs the presence subscription of one channel,
//     presence-room-demo of the first app, and nothing else.
//
// The handlers are safe for concurrent use; Register is called once per mux.
package dashboard
