package resume

import "github.com/headcount/headcount/pkg/keyspace"

// keys names this package's Redis keys; nothing else spells them.
type keys struct{ ks keyspace.Space }

// state is the hash of (app, id), "<prefix>:{<app>}:resume:<id>": channel
// -> the serial of its last event the id's page acknowledged.
func (k keys) state(app, id string) string { return k.ks.App(app) + "resume:" + id }
