// Package lifecycle holds what every binary's lifecycle shares:
//
//   - Service, the contract of the three apps (wsnode, cleaner, httpapi):
//     New binds, Run serves and releases, Stop is idempotent and frees
//     what New took even if Run never ran; State keeps those promises for
//     an app, and lifecycletest.Contract checks them;
//   - Main, the body of each thin main, with its exit codes;
//   - the admin HTTP server (/metrics, /healthz, /readyz) and a Server that
//     serves an http.Server inside an oklog/run group with a deadline on
//     every phase of a connection (Timeouts); ListenCapped applies a
//     port policy (pkg/portcap) too, closing the connection that waited
//     longest for a request to admit a new one at the cap, and refusing
//     (portcap's 503) only when all are busy;
//   - LivenessHandler, a GET answered 200 at once and held open, past the
//     server's write deadline, until the process stops it, so its client
//     learns of the process's death when the kernel closes the connection.
//
// It installs no signal handlers except in Main. The name is its own:
// github.com/oklog/run, which the apps use for their run groups, keeps the
// name run.
//
// State, Readiness and Server are safe for concurrent use; Server.Serve is
// called at most once.
package lifecycle
