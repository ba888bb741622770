package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	redisErrors prometheus.Counter
	redisUp     prometheus.Gauge

	// listingComputed counts full listings this replica read from Redis;
	// summed over replicas it shows the single flight working.
	listingComputed prometheus.Counter
	// listingShared counts full listings answered with another request's
	// result, by source: cached or waited.
	listingShared *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_httpapi_requests_total",
			Help: "HTTP API requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "headcount_httpapi_request_duration_seconds",
			Help:    "HTTP API request latency by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		redisErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_httpapi_redis_errors_total",
			Help: "Redis reads and readiness pings that failed.",
		}),
		redisUp: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_httpapi_redis_up",
			Help: "1 if the last readiness ping to Redis succeeded, else 0.",
		}),
		listingComputed: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_httpapi_listing_computed_total",
			Help: "Full channel listings this replica computed from Redis (the others were shared).",
		}),
		listingShared: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_httpapi_listing_shared_total",
			Help: "Full channel listings answered with a result computed by another request on any replica: cached, or waited for while it was computed.",
		}, []string{"source"}),
	}
}
