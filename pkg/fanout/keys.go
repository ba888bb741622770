package fanout

import "github.com/headcount/headcount/pkg/keyspace"

// keys names the bus's Redis Pub/Sub channels (topics); this file is the
// only place that spells them.
type keys struct{ ks keyspace.Space }

// topic is the Redis Pub/Sub channel of one channel of one app:
// "<prefix>:{<app>}:ev:<channel>". The {app} hash tag puts every topic of
// an app in one slot: on Redis Cluster one connection (to that slot's
// master) serves all of an app's channels, and one SSUBSCRIBE may name many
// of them.
func (k keys) topic(app, channel string) string { return k.ks.App(app) + "ev:" + channel }
