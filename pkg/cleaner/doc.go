// Package cleaner is the cleaner binary as an embeddable app. Cleaners run
// as an active/passive set: each contends for one lease in Redis and only the
// holder scans. The active cleaner finds, per app, the wsnodes whose
// last-seen is older than dead-after by Redis's clock and reaps each in one
// atomic unit (counts.Store.ReapNode), which re-checks staleness itself.
// Reaping is idempotent, so two cleaners that both believe they are active
// never subtract a node twice; the lease only avoids wasted work. Before each
// reap the active cleaner checks that its lease is still valid, so one that
// resumes from a pause past its TTL stops before touching anything.
// --lease-ttl 0 turns the lease off (tests only, with a loud warning at
// start): the cleaner is then always active, which is how the tests show
// that several cleaners reaping at once subtract nothing twice.
//
// A crashed node is reaped sooner, without waiting for dead-after: every
// wsnode holds a subscription to its own liveness channel (counts.Liveness),
// which Redis drops the moment the process's connections close. Every
// --liveness-interval (100 ms) the active cleaner reads, in one PUBSUB
// NUMSUB (SHARDNUMSUB on the liveness shard of a Cluster), which of the
// nodes whose last-seen is past --liveness-grace (300 ms) lost theirs, and
// reaps those that a later check finds without one too (none seeing it
// subscribed in between: a node replacing a dropped connection
// resubscribes within one interval) through the same ReapNode, with the grace as the age it
// re-checks atomically. A check costs three round trips (the app set, one
// pipeline of stale.lua per app, the NUMSUB) and O(apps + nodes) work in
// Redis. Only nodes this cleaner has seen subscribed are eligible (a node
// built without the subscription waits for dead-after), and only while
// the cleaner's own liveness subscription (its canary) has held for a
// second, since a restarted or failed-over liveness shard drops every
// subscription at once. A paused or partitioned process keeps its TCP
// connections open, so its subscription stays and it is reaped at
// dead-after as before. So does a node killed before the check saw its
// subscription (every fifth check names every node, so within about 0.5 s
// of its first count write); one killed within a second of the cleaner's
// start waits for that second. BenchmarkRecovery: 0.13-0.25 s from SIGKILL
// to exact counts (medians), against 2.8 s by the heartbeat alone. Reaps are logged with
// reason=connection_closed or reason=heartbeat_stale and counted by that
// label in headcount_cleaner_reaped_nodes_total.
//
// The active cleaner also audits one app every audit interval (apps take
// turns; DefaultAuditInterval, stretched to 50 times the last audit's
// duration so a huge app's audit script holds its shard for a small share
// of the time) with counts.Store.Audit, whose read is one atomic script,
// in a goroutine of its own so a slow audit never delays reaping, and
// exports the differences it finds as
// headcount_cleaner_count_drift{app}. It never repairs on its own: drift
// is a bug to look at, and repairing erases the evidence, trusts the
// contributions even when they are the corrupt side, and announces no
// presence changes. Repair is the operator's `cleaner audit --repair`
// (Audit in this package). It also exports headcount_cleaner_nodes_alive,
// headcount_cleaner_reap_latency_seconds (last heartbeat to reaping, by the
// Redis clock) and headcount_cleaner_lease_changes_total. Per-app gauges
// are dropped when the cleaner turns passive, so only the active one
// exports them.
package cleaner
