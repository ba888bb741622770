// Package e2e runs headcount as a user would: the real binaries as separate
// processes over a real redis-server (single node and a 3-master Cluster),
// real pusher-js clients from test/compat, and counts read through the real
// pusher-http-go SDK. Nodes and cleaners are killed with SIGKILL.
//
// Each test starts its own Redis and processes on ports of its own, so most
// run in parallel (t.Parallel; two at a time on two cores). The ones that
// time a reap or a failover against a bound of a few seconds
// (TestSIGKILLedNodeLeavesCountsAtOnce, TestSIGSTOPpedNodeWaitsForDeadAfter,
// TestWatchReapsASIGKILLedNodeAtOnce, TestCrashedNodesAreCleanedUp,
// TestClusterFailoverEndToEnd, TestSentinelFailoverEndToEnd) do not: they
// run first, one at a time, with the package's cores to themselves.
package e2e
