// Package appreload keeps a binary's apps current without a restart: a
// Reloader reads its apps.Source every few seconds, at once when fsnotify
// reports a change in an apps file's directory (where Kubernetes swaps
// the ..data symlink of a mounted Secret or ConfigMap), and on SIGHUP,
// and replaces the apps.Registry's set with what it read.
//
// What it guarantees:
//   - A source that does not parse, does not validate or cannot be read
//     changes nothing: the last good apps keep serving, the failure is
//     logged (once per distinct failure, again once a minute while it
//     lasts) and counted (headcount_apps_reloads_total{result="failed"},
//     headcount_apps_source_up 0). Readiness is the binary's business:
//     it is unaffected once apps were loaded.
//   - A set that equals the one served (same content, whatever the
//     formatting) replaces nothing and wakes nobody.
//   - headcount_apps_version_info{hash} and
//     headcount_apps_loaded_timestamp_seconds say which set each process
//     serves, so a fleet that disagrees shows on one graph.
//
// What a change does to open sockets, webhooks and the HTTP API is the
// binaries' part: they wait on apps.Registry.Changed.
package appreload
