package wsnode

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
)

// The label values of errors_total, frames_received_total and
// disconnects_total are part of the node's metrics contract: each one
// exists from the start, at zero, and no other does.
func TestMetricLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	newMetrics(reg, func() float64 { return 0 }, func() bool { return false }, func() bool { return false })
	require.ElementsMatch(t, []string{
		"app_not_found", "app_disabled", "bad_protocol", "malformed_frame", "invalid_channel",
		"channel_limit", "unsupported_event", "frame_too_big", "write", "idle_timeout", "write_timeout",
		"drain_forced_close", "connection_limit", "auth", "presence_limit", "redis", "client_event_refused",
		"publish", "accept", "handshake_refused", "user_auth_timeout", "socket_cap", "watchlist_limit", "origin_not_allowed",
		"invalid_utf8",
		"already_subscribed", "frame_rate", "app_channel_limit",
	}, labelValues(t, reg, "headcount_wsnode_errors_total", "reason"))
	require.ElementsMatch(t, []string{
		"malformed", "binary", "ping", "pong", "subscribe", "unsubscribe", "signin", "client_event", "other",
	}, labelValues(t, reg, "headcount_wsnode_frames_received_total", "type"))
	require.ElementsMatch(t, []string{
		"1000", "1001", "1002", "1005", "1006", "1007", "1008", "1009", "1011",
		"4001", "4003", "4004", "4007", "4008", "4009", "4100", "4200", "4201", "other",
	}, labelValues(t, reg, "headcount_wsnode_disconnects_total", "code"))
}

// labelValues is the values of label across the series of metric in reg,
// each of which must be at zero.
func labelValues(t *testing.T, reg *prometheus.Registry, metric, label string) []string {
	t.Helper()
	f, err := metricstest.Gather(reg)
	require.NoError(t, err)
	sum, _ := f.Sum(metric)
	require.Zero(t, sum)
	return f.LabelValues(metric, label)
}
