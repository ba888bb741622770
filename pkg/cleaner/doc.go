// Package cleaner is the cleaner binary as an embeddable app. Cleaners run
// as an active/passive set: each contends for one lease in Redis and only the
// holder scans. The active cleaner finds, per app, the wsnodes whose
// last-seen is older than dead-after by Redis's clock and reaps each in one
// atomic unit (counts.Store.ReapNode), which re-checks staleness itself.
// Reaping is idempotent, so two cleaners that both believe they are active
// never subtract a node twice; the lease only avoids wasted work. Before each
// reap the active cleaner checks that its lease is still valid, so one that
// resumes from a pause past its TTL stops before touching anything.
package cleaner
