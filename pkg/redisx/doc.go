// Package redisx builds the Redis client every binary uses: a single server
// from a redis:// URL, or a Redis Cluster from seeds. Callers get a
// redis.UniversalClient and never branch on the mode; packages that own keys
// keep every atomic unit in one hash slot so both modes behave alike.
//
// The names those packages use come from pkg/keyspace.
//
// Everything here is safe for concurrent use.
package redisx
