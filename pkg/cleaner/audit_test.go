package cleaner

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// TestActiveCleanerExportsDriftAndNodeMetrics runs a cleaner with a fast
// audit and checks every metric it owns: drift appears when a global count
// is corrupted and goes when it is repaired (by hand: the loop never
// repairs), nodes alive, reap latency, and lease changes.
func TestActiveCleanerExportsDriftAndNodeMetrics(t *testing.T) {
	// An audit that took d waits auditDutyFactor*d before the next: on a
	// loaded machine one slow audit puts seconds before the next.
	const auditWait = time.Minute
	// Not parallel: its live node must heartbeat within the 200 ms
	// dead-after, which tests beside it stretch past on two cores.
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := counts.NewStore(rdb, keyspace.Space{})

	live := counts.NewRecorder(rdb, "live", counts.RecorderOptions{Heartbeat: 20 * time.Millisecond})
	live.Add("app", "x", 2)
	require.NoError(t, live.Flush(ctx))
	liveDone := make(chan error, 1)
	go func() { liveDone <- live.Run(ctx) }()
	dead := counts.NewRecorder(rdb, "dead", counts.RecorderOptions{Heartbeat: time.Hour})
	dead.Add("app", "x", 1)
	require.NoError(t, dead.Flush(ctx))

	cfg := config.DefaultCleaner()
	cfg.Redis = srv.URL()
	cfg.AdminAddr = ""
	cfg.DeadAfter = 200 * time.Millisecond
	cfg.ScanInterval = 20 * time.Millisecond
	cfg.LeaseTTL = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: cfg, Logger: logging.TestLogger(t), Registry: reg, AuditInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()

	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.active) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 1, testutil.ToFloat64(a.m.leaseChanges.WithLabelValues("active")))

	// The dead node is reaped at least dead-after after its last heartbeat.
	require.Eventually(t, func() bool { return metricstest.Value(t, reg, "headcount_cleaner_reap_latency_seconds_count") == 1 },
		5*time.Second, 5*time.Millisecond)
	require.GreaterOrEqual(t, metricstest.Value(t, reg, "headcount_cleaner_reap_latency_seconds_sum"), cfg.DeadAfter.Seconds())
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.nodesAlive.WithLabelValues("app")) == 1 },
		5*time.Second, 5*time.Millisecond)

	// Consistent: audits run clean and the gauge says 0.
	clean := testutil.ToFloat64(a.m.audits.WithLabelValues("clean"))
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.audits.WithLabelValues("clean")) > clean },
		auditWait, 5*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(a.m.drift.WithLabelValues("app")))

	// Drift: two entries off. The loop reports it and leaves it alone.
	require.NoError(t, counts.CorruptChannel(ctx, rdb, keyspace.Space{}, "app", "x", 3))
	require.NoError(t, counts.CorruptChannel(ctx, rdb, keyspace.Space{}, "app", "ghost", 1))
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.drift.WithLabelValues("app")) == 2 },
		auditWait, 5*time.Millisecond)
	drifted := testutil.ToFloat64(a.m.audits.WithLabelValues("drift"))
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.audits.WithLabelValues("drift")) > drifted+2 },
		auditWait, 5*time.Millisecond)
	n, err := store.Channel(ctx, "app", "x")
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the active loop never repairs")

	// An operator repairs; the next audits say 0 again.
	var out bytes.Buffer
	found, err := Audit(ctx, cfg, &out, true)
	require.NoError(t, err)
	require.True(t, found)
	require.Contains(t, out.String(), "repaired 2 entries; consistent now")
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.drift.WithLabelValues("app")) == 0 },
		auditWait, 5*time.Millisecond)

	// Passive again: what it saw while active is no longer exported.
	stop()
	require.NoError(t, <-done)
	require.EqualValues(t, 1, testutil.ToFloat64(a.m.leaseChanges.WithLabelValues("passive")))
	require.Zero(t, testutil.CollectAndCount(a.m.drift))
	require.Zero(t, testutil.CollectAndCount(a.m.nodesAlive))
	cancel()
	require.NoError(t, <-liveDone)
}
