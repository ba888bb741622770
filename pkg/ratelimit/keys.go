package ratelimit

import "github.com/headcount/headcount/pkg/keyspace"

// keys spells the limiter's Redis names; nothing else writes them. One
// hash per app and kind, "<prefix>:{<app>}:rate:<kind>", under the app's
// hash tag like every key of the app.
type keys struct{ ks keyspace.Space }

func (k keys) window(app string, kind Kind) string { return k.ks.App(app) + "rate:" + string(kind) }
