// Package cleaner is the cleaner binary as an embeddable app. Cleaners run
// as an active/passive set: each contends for one lease in Redis and only the
// holder scans. The active cleaner finds, per app, the wsnodes whose
// last-seen is older than dead-after by Redis's clock and reaps each
// (counts.Store.ReapNode: a first atomic unit that re-checks staleness
// itself, then slices of bounded size), and drains reaps left half done
// (counts.Store.FinishReaps).
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
// which Redis drops the moment the process's connections close, and
// records with each flush a node-level last-seen on the liveness shard
// (counts.RecorderOptions.Liveness), marked subscribed once Redis has
// confirmed its subscription. Every --liveness-interval (100 ms) the active
// cleaner reads there the nodes whose node-level last-seen is past
// --liveness-grace (300 ms) and at most dead-after old, and, in one PUBSUB
// NUMSUB (SHARDNUMSUB on the liveness shard of a Cluster), which of them
// lost their subscription. A node that a later check finds without one too
// (none seeing it subscribed in between: a node replacing a dropped
// connection resubscribes within one interval) is looked up in every app
// (one ZSCORE per app) and reaped in each through the same ReapNode, with
// the grace as the age it re-checks atomically against that app's
// last-seen; its node-level entry is then deleted. Only nodes this cleaner
// saw subscribed, or that recorded a confirmed subscription themselves,
// are eligible, so a node killed before any check saw it (in its first
// ~100 ms) is reaped by the check too. A node that records no node-level
// entry (a build from before it, during a rolling upgrade) or lost it is
// never looked at and waits for dead-after. The cleaner's own liveness
// subscription (its canary) must have held for a second, since a restarted
// or failed-over liveness shard drops every subscription at once; a paused
// or partitioned process keeps its TCP connections open, so its
// subscription stays and it is reaped at dead-after as before.
//
// A check costs two round trips and 8 Redis commands whatever the number
// of apps: O(log nodes + nodes past the grace) on the liveness shard. It
// used to run stale.lua once per app: with 10,000 apps (two nodes each)
// that was 30,002 commands, 58 ms of command time and 45 ms of Redis CPU
// per check, 10 checks a second; it is now 8 commands and 17 µs of
// command time (Redis CPU by INFO cpu, which also holds the INFO reads and
// background work: 28 µs with 1 app, about 65 µs with 1,000 or 10,000).
// Only a node found dead costs O(apps), once:
//
//	go test -run '^$' -bench BenchmarkLivenessCheck -benchtime 200x ./pkg/cleaner/
//
// BenchmarkRecovery: 0.13-0.25 s from SIGKILL to exact counts (medians),
// against 2.8 s by the heartbeat alone; a node in 500 apps is reaped in
// every one 0.23 s after its connection closed
// (TestLivenessReapsANodeInEveryOfManyApps, 100 ms grace). Reaps are
// logged with reason=connection_closed or reason=heartbeat_stale and
// counted by that label in headcount_cleaner_reaped_nodes_total, whose
// series for an app exist at 0 from its first scan (so an alert sees the
// first reap as an increase).
//
// The active cleaner also audits one app every audit interval (apps take
// turns; DefaultAuditInterval, stretched to 50 times the last audit's
// duration so a huge app's audit takes a small share of its shard's
// time) with counts.Store.Audit, whose reads are short atomic slices,
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
//
// An App keeps lifecycle.Service: Run is called once, Stop any number of
// times from any goroutine, and a Stop before Run frees the admin listener
// and the Redis client New took.
package cleaner
