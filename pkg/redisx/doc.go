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
// Each new connection (never each command) uses the Redis TLS files and
// password file as they are then: they are looked at again at most once
// a second and reloaded when one changes, so certificates cert-manager
// renews and rotated passwords need no restart. A file that fails to load
// leaves the last good one in use (a log line, and
// headcount_redis_file_reloads_total{result="error"}); each certificate's
// expiry is headcount_tls_cert_expiry_timestamp_seconds{file}, on the
// registry config.Common.RedisRegisterer names.
//
// The names those packages use come from pkg/keyspace.
//
// Everything here is safe for concurrent use.
package redisx
