package fanout

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	published       prometheus.Counter
	publishErrors   prometheus.Counter
	publishDuration prometheus.Histogram
	received        prometheus.Counter
	unwanted        prometheus.Counter
	decodeErrors    prometheus.Counter
	subscribed      prometheus.Gauge
	subscribeErrors prometheus.Counter
	outages         prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		published: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_published_total",
			Help: "Events published to Redis pub/sub.",
		}),
		publishErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_publish_errors_total",
			Help: "Publishes that failed (the event reached no node).",
		}),
		publishDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "headcount_fanout_publish_duration_seconds",
			Help:    "Time to publish one event to Redis (one round trip).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		received: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_received_total",
			Help: "Messages received from Redis pub/sub, before decoding.",
		}),
		unwanted: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_unwanted_total",
			Help: "Messages received for channels this node left while the unsubscribe was in flight (dropped).",
		}),
		decodeErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_decode_errors_total",
			Help: "Messages received that could not be decoded (dropped).",
		}),
		subscribed: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_fanout_subscribed_topics",
			Help: "Redis pub/sub topics (app, channel) this node is subscribed to.",
		}),
		subscribeErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_subscribe_errors_total",
			Help: "SUBSCRIBE/SSUBSCRIBE commands that failed and were retried.",
		}),
		outages: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_fanout_outages_total",
			Help: "Times the pub/sub connections went from established to lost.",
		}),
	}
}
