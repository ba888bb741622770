// Package resume keeps, for each page that connects with a resume id
// (/r/{id}/app/{key}), the serial of the last event of each history
// channel its client acknowledged: a Redis hash per (app, id), which a
// reconnect of the page reads to be sent what it missed (package wsnode).
//
// Guarantees:
//   - A save never moves a channel's serial backwards: the script keeps
//     the later of the stored and the given serial, compared as stream
//     ids, so a late save of an old connection cannot undo a newer one's
//     progress.
//   - One round trip per app for any number of ids (Save pipelines them),
//     and all of an app's keys share its hash tag: on Redis Cluster the
//     round trip goes to one shard.
//   - Nothing outlives the app's longest history window: each save sets
//     the hash's TTL to it (Save.TTL), after which what it named is gone
//     from the histories too.
//
// This file's package is the only place that spells the keys (keys.go).
package resume
