package webhook

import (
	"sync"

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
	oldest                           *prometheus.GaugeVec
	active                           *prometheus.GaugeVec
	logBytes                         *prometheus.GaugeVec
	logDropped                       *droppedCollector
}

// droppedCollector reports each app's count of events its log's budget
// refused, as the log's index keeps it (eventlog.Stats.Dropped), from the
// replica that trims the log: a counter kept in Redis, so every appender's
// refusals are in it and it survives the trimming moving to another
// replica.
type droppedCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	v    map[string]float64
}

func (c *droppedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *droppedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for app, v := range c.v {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, v, app)
	}
}

// set records app's count; forget stops reporting it.
func (c *droppedCollector) set(app string, v int64) {
	c.mu.Lock()
	c.v[app] = float64(v)
	c.mu.Unlock()
}

func (c *droppedCollector) forget(app string) {
	c.mu.Lock()
	delete(c.v, app)
	c.mu.Unlock()
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	labels := []string{"app", "webhook"}
	dropped := &droppedCollector{v: map[string]float64{}, desc: prometheus.NewDesc("headcount_webhook_log_dropped_total",
		"Events the app's event log refused because it held its byte budget (maxWebhookLogSizeInMb), whoever logged them; reported by the replica that trims the log. Webhooks that ask for events_dropped are told where they went missing.",
		[]string{"app"}, nil)}
	reg.MustRegister(dropped)
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
			Name: "headcount_webhook_debounced_total", Help: "Logged changes not sent because they were undone before this webhook's turn came (a reload's channel_vacated and occupied, a blip's member_added and removed), or logged again after their channel's occupancy change.",
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
		// A timestamp, not an age: it keeps aging while a stuck deliverer
		// updates nothing.
		oldest: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_webhook_oldest_pending_timestamp_seconds", Help: "Creation time (Unix seconds) of the first event in log order that this replica read for this webhook and has not yet delivered or given up; 0 when none is pending. time() minus it is how far the webhook is behind.",
		}, labels),
		logBytes: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_webhook_log_bytes", Help: "Bytes the app's event log holds (as its byte budget counts them), read after each trim by the replica that trims it.",
		}, []string{"app"}),
		active: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_webhook_delivering", Help: "1 while this replica holds the lease to deliver this webhook.",
		}, labels),
		logDropped: dropped,
	}
}
