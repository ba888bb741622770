package webhook

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// TestBacklogGauges: while the receiver fails, the replica reports when
// its oldest pending event was created (what the HeadcountWebhookBacklogOld
// alert reads), and 0 once it is delivered; give-ups are counted from 0,
// so the first one is an increase; and a replica that stops delivering
// reports no backlog, which is another's now.
func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	f := newFixture(t, redistest.New(t).Client(t))
	var failing atomic.Bool
	failing.Store(true)
	f.rcv.fail = func(string) bool { return failing.Load() }
	stop, reg := f.start(t, "r1", Options{})
	const oldest = "headcount_webhook_oldest_pending_timestamp_seconds"

	require.Eventually(t, func() bool { return len(series(t, reg, "headcount_webhook_dropped_total")) == 2 },
		10*time.Second, 10*time.Millisecond, "the give-up counters exist once the replica delivers")
	for _, s := range series(t, reg, "headcount_webhook_dropped_total") {
		require.Zero(t, s.value, s.labels)
	}

	before := float64(time.Now().UnixMilli()) / 1000
	f.append(t, Event{Name: ChannelOccupied, Channel: "a"})
	after := float64(time.Now().UnixMilli()) / 1000
	require.Eventually(t, func() bool { return summed(t, reg, "headcount_webhook_failed_total") >= 1 }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return summed(t, reg, oldest) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.InDelta(t, (before+after)/2, summed(t, reg, oldest), (after-before)/2+0.01,
		"the creation time of the pending event")

	failing.Store(false)
	f.rcv.waitFor(t, 1)
	require.Eventually(t, func() bool { return summed(t, reg, oldest) == 0 }, 10*time.Second, 10*time.Millisecond,
		"nothing pending once delivered")

	stop()
	require.Empty(t, series(t, reg, oldest), "a replica that no longer delivers reports no backlog")
	require.Empty(t, series(t, reg, "headcount_webhook_queue_depth"), "nor a queue")
}

type sample struct {
	labels map[string]string
	value  float64
}

// series returns every series of one metric family of reg.
func series(t *testing.T, reg *prometheus.Registry, name string) []sample {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var out []sample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := sample{labels: map[string]string{}, value: m.GetCounter().GetValue() + m.GetGauge().GetValue()}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}
