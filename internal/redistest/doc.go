// Package redistest starts real redis-server processes on free loopback
// ports for tests: a single server (durable.go: one with its append-only
// file on, to crash and recover with its data), or a 3-master Redis
// Cluster (to which a replica of one master can be added, replica.go);
// and, as production runs them, a TLS-only server with certificates the
// test makes (tls.go; rotate.go has a CA that issues new certificates
// mid-test and a directory updated as the kubelet updates a mounted
// Secret), a Cluster with passwords (secure.go), and a master
// with a replica and three sentinels (sentinel.go); and redis_exporter,
// Debian's, reading a server (exporter.go). Servers are stopped
// and their files removed when the test ends. Tests fail with a clear
// message when redis-server is not installed.
package redistest
