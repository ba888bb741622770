// Package cleaner is the cleaner binary as an embeddable app. Cleaners run
// as an active/passive set: each contends for one lease in Redis and only the
// holder works. The active cleaner reaps the wsnodes whose last-seen is older
// than dead-after by Redis's clock (counts.Store.ReapNode: a first atomic
// unit that re-checks staleness itself, then slices of bounded size), drains
// reaps left half done (counts.Store.FinishReaps), and audits one app at a
// time.
//
// Guarantees:
//   - Two cleaners that both believe they are active never subtract a node
//     twice: reaping is idempotent, and the lease only avoids wasted work.
//     Before each reap the active cleaner checks that its lease is still
//     valid, so one that resumes from a pause past its TTL stops before
//     touching anything. --lease-ttl 0 turns the lease off (tests only, with
//     a loud warning at start): the cleaner is then always active, which is
//     how the tests show that several cleaners reaping at once subtract
//     nothing twice.
//   - A crashed node is reaped sooner than dead-after: every
//     --liveness-interval the active cleaner checks which nodes lost their
//     liveness subscription (their Redis connections closed), in two round
//     trips and 8 Redis commands whatever the number of apps; only a node
//     found dead costs O(apps), once. A paused or partitioned node keeps its
//     connections and is reaped at dead-after. docs/INTERNALS.md ("cleaner")
//     says which nodes the check trusts; RELIABILITY.md measures it.
//   - Sooner still for a node that registered an admin address: the active
//     cleaner (only it: passive ones could not reap) holds one GET
//     /liveness open per such node (watch.go), at most one connection per
//     node listed, each redialled with backoff. When one ends or is refused,
//     the node is reaped at once only if Redis confirms its liveness
//     subscription gone (canary trusted), sparing any app it wrote to since
//     the end; a node still subscribed is left alone, so a broken path
//     reaps nobody live. Nothing it starts outlives Stop.
//   - The audit (counts.Store.Audit; apps take turns every audit interval,
//     stretched to 50 times the last audit's duration so a huge app's audit
//     takes a small share of its shard's time) runs in a goroutine of its
//     own, so a slow audit never delays reaping, and exports
//     headcount_cleaner_count_drift{app}. It never repairs on its own: drift
//     is a bug to look at, and repairing erases the evidence, trusts the
//     contributions even when they are the corrupt side, and announces no
//     presence changes. Repair is the operator's `cleaner audit --repair`
//     (Audit in this package).
//   - Per-app gauges are dropped when the cleaner turns passive, so only the
//     active one exports them.
//
// An App keeps lifecycle.Service: Run is called once, Stop any number of
// times from any goroutine, and a Stop before Run frees the admin listener
// and the Redis client New took.
package cleaner
