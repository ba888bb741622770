package apps

import "context"

// Source loads the whole set of apps anew, from wherever they are kept (an
// apps file, a database table). A Reloader calls Load periodically and on
// demand and serves what the last successful Load returned; Load returns an
// error, and changes nothing, when what it finds does not parse or validate
// or cannot be read.
type Source interface {
	// Load reads and decodes every app. The Registry it returns is new;
	// Version identifies its content.
	Load(ctx context.Context) (*Registry, error)
	// String names the source in logs, without credentials ("apps file
	// /etc/headcount/apps.json", "postgres apps table apps at db:5432/soketi").
	String() string
}
