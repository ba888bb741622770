// Package redisx builds the Redis client every binary uses: a single server
// from a redis:// URL, or a Redis Cluster from seeds. Callers get a
// redis.UniversalClient and never branch on the mode; packages that own keys
// keep every atomic unit in one hash slot so both modes behave alike.
//
// Keyspace is how those packages spell their names: each owner keeps its
// own keys file, and every name it builds starts with the deployment's
// prefix (--redis-prefix), so deployments with different prefixes share one
// Redis without seeing each other. ScanPrefix finds keys by prefix on
// whichever shards can hold them.
//
// Everything here is safe for concurrent use; a Keyspace is a value.
package redisx
