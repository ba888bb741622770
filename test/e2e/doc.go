// Package e2e runs headcount as a user would: the real binaries as separate
// processes over a real redis-server (single node and a 3-master Cluster),
// real pusher-js clients from test/compat, and counts read through the real
// pusher-http-go SDK. Nodes and cleaners are killed with SIGKILL.
package e2e
