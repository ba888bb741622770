package history

import "github.com/headcount/headcount/pkg/keyspace"

// keys names the Redis keys of the histories; this file is the only place
// that spells them. All of an app's share its hash tag, so one script
// (publish.lua) may touch the channel's stream, its fanout topic and the
// app's budget keys on Redis Cluster.
type keys struct{ ks keyspace.Space }

// stream is one channel's history, "<prefix>:{<app>}:hist:<channel>": a
// Redis stream whose ids are the events' serials. publish.lua derives the
// other channels' streams from it by the channel's name, so it ends with
// the channel.
func (k keys) stream(app, channel string) string { return k.ks.App(app) + "hist:" + channel }

// sizes is the app's hash of the bytes each channel's stream holds, and
// their sum (scripts/lib.lua).
func (k keys) sizes(app string) string { return k.ks.App(app) + "hist-bytes" }

// heads is the app's sorted set of channels by when their oldest entry
// expires (scripts/lib.lua).
func (k keys) heads(app string) string { return k.ks.App(app) + "hist-heads" }
