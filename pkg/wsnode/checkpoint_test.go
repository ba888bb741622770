package wsnode

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestCheckpointLeavesClosingSocketsAlone: a resumable socket already
// dead when a checkpoint passes (closed, or cut as a slow consumer, and
// not yet out of the set) is not counted as a slow consumer again. On the
// old code every checkpoint in that window counted it once more.
func TestCheckpointLeavesClosingSocketsAlone(t *testing.T) {
	t.Parallel()
	a := &App{log: hclog.NewNullLogger(), send: newSender()}
	a.m = newMetrics(prometheus.NewRegistry(), func() float64 { return 0 }, func() bool { return true }, func() bool { return false })
	s := &socket{node: a, resume: &resumable{id: "page-closing"}, dead: true}
	s.closing.Store(true)
	a.resumers.add(s)
	a.checkpoint(context.Background())
	a.checkpoint(context.Background())
	require.Zero(t, testutil.ToFloat64(a.m.slow))
}
