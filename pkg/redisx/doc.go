// Package redisx builds the Redis client every binary uses: a single server
// from a redis:// or rediss:// URL, a Redis Cluster from seeds or a
// cluster URL, or the master of a Redis Sentinel deployment, each with the
// credentials and TLS settings of pkg/config. Callers get a
// redis.UniversalClient; the only branch on the mode is on
// *redis.ClusterClient (sharded pub/sub, per-shard commands), and a
// Sentinel master is a *redis.Client, so it behaves as a single server in
// every such branch. Packages that own keys keep every atomic unit in one
// hash slot so all modes behave alike. A Cluster client reloads its slot
// map at least once a second while it sends commands, so it follows a
// failover even when the dead primary answers nothing (no MOVED).
//
// The names those packages use come from pkg/keyspace.
//
// Everything here is safe for concurrent use.
package redisx
