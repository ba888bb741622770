// Package load is a Pusher-protocol load generator for headcount (run by
// cmd/hcload and make bench). It opens sockets to wsnodes from many
// 127.0.0.x source addresses, subscribes them over a channel distribution
// (a few hot channels, many cold ones, a presence share), churns them,
// publishes through the HTTP API, and measures connect time,
// subscribe-to-counted time (until the HTTP API shows a probe socket, to
// within 5 ms),
// publish-to-delivery latency and errors.
//
// Guarantees: it targets loopback only (every address must be in
// 127.0.0.0/8, checked before any dial); it is bounded in sockets
// (MaxSockets) and in time (every run ends by itself after its ramp, hold
// and a drain, or when its context ends); each socket costs one goroutine
// and one small read buffer in this process. Its own garbage collector
// does not run during a hold unless its memory grows by a GiB, since one
// collection slows every simulated client at once; the summary counts the
// times it did (ToolCollections).
package load
