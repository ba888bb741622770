// Package keyspace is how the packages that own Redis names spell them: a
// Space starts every key and Pub/Sub channel with the deployment's prefix
// (--redis-prefix, DefaultPrefix unless set) and ':', and an app's names
// with its id as a Cluster hash tag, so each owner's atomic units stay in
// one slot. Each owner keeps its own keys file built on a Space; no other
// package spells a name. Deployments with different prefixes share one
// Redis without seeing each other. ScanPrefix finds keys by prefix on
// whichever shards can hold them.
//
// The package imports nothing of headcount's, so the domain packages that
// own keys depend on it alone. A Space is a value, safe for concurrent use.
package keyspace
