// Package appreload keeps a binary's apps current without a restart: a
// Reloader reads its apps.Source every few seconds, at once when fsnotify
// reports a change in an apps file's directory (where Kubernetes swaps
// the ..data symlink of a mounted Secret or ConfigMap), and on SIGHUP,
// and replaces the apps.Registry's set with what it read; and at once when
// a request names an app the process does not serve (Reloader.Lookup).
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
//   - A request naming a key or id not served (or an app disabled, or a
//     key not of its app) is answered after a read of the source that
//     started after it arrived, so an app inserted, enabled or given a
//     key is served by every process at its first client, not at its next
//     poll. Such reads are one at a time per process, shared by every
//     miss waiting, and at most two a second whatever the flood; a name
//     read for in vain is refused without another read for 3 s (a set of
//     at most 4,096). A request for an app served never waits; one that
//     does waits at most 10 s, and a failed read keeps the refusal
//     (headcount_apps_lookups_total{result}).
//   - Reads never overlap: the poll's and the lookups' replace the apps
//     in the order they read.
//   - headcount_apps_version_info{hash} and
//     headcount_apps_loaded_timestamp_seconds say which set each process
//     serves, so a fleet that disagrees shows on one graph.
//
// What a change does to open sockets, webhooks and the HTTP API is the
// binaries' part: they wait on apps.Registry.Changed.
package appreload
