package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are by app and webhook (the target's group name: a hash of its
// URL, so a URL's query string never lands in a label).
type metrics struct {
	sent, failed, retried, debounced *prometheus.CounterVec
	dropped                          *prometheus.CounterVec
	latency                          *prometheus.HistogramVec
	requestEvents                    *prometheus.HistogramVec
	depth                            *prometheus.GaugeVec
	active                           *prometheus.GaugeVec
	logBytes                         *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	labels := []string{"app", "webhook"}
	return &metrics{
		sent: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_webhook_sent_total", Help: "Webhook events delivered (the receiver answered 2xx).",
		}, labels),
		failed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_webhook_failed_total", Help: "Webhook delivery attempts that failed (no answer, or not 2xx).",
		}, labels),
		retried: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_webhook_retried_total", Help: "Webhook delivery attempts after a failed one.",
		}, labels),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_webhook_dropped_total", Help: "Webhook events given up after the retry window (each also logged), or unreadable in the log.",
		}, append(labels, "reason")),
		debounced: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_webhook_debounced_total", Help: "channel_vacated/member_removed not sent because the channel or member came back within the debounce, with the event that cancelled them.",
		}, labels),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "headcount_webhook_delivery_seconds",
			Help:    "From an event's creation to its delivery (debounce and retries included).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, labels),
		requestEvents: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "headcount_webhook_request_events",
			Help:    "Events in each webhook request (attempts, retries included): 1 without batching, up to the webhook's batch size with it.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}, labels),
		depth: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_webhook_queue_depth", Help: "Events read and not yet delivered or given up, for webhooks this replica delivers.",
		}, labels),
		logBytes: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_webhook_log_bytes", Help: "Bytes the app's event log holds (as its byte budget counts them), read after each trim by the replica that trims it.",
		}, []string{"app"}),
		active: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_webhook_delivering", Help: "1 while this replica holds the lease to deliver this webhook.",
		}, labels),
	}
}
