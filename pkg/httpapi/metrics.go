package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/headcount/headcount/pkg/portcap"
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

	// maxConns is the connection cap in force on the API port.
	maxConns prometheus.Gauge
	// connsRefused counts connections refused at the cap, connsClosedIdle
	// and connsClosedNew those closed to admit a new one, and acceptErrors
	// the accepts that failed.
	connsRefused    prometheus.Counter
	connsClosedIdle prometheus.Counter
	connsClosedNew  prometheus.Counter
	acceptErrors    prometheus.Counter
}

// newMetrics registers the API's metrics; portConns reads the number of
// connections open on the API port, ready what /readyz reports.
func newMetrics(reg prometheus.Registerer, portConns func() float64, ready func() bool) *metrics {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_httpapi_port_connections",
		Help: "Connections open on the API port, in a request or waiting for one: what --max-connections caps.",
	}, portConns)
	// Read at each scrape, so alerts see what /readyz answers (a probe's
	// failures are seen only by the prober).
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_httpapi_ready",
		Help: "1 while /readyz answers 200 (Redis answers its ping, the apps are loaded, no drain), else 0.",
	}, func() float64 { return map[bool]float64{true: 1}[ready()] })
	closed := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_httpapi_connections_closed_for_room_total",
		Help: "Connections closed at --max-connections to admit a new one, by what they were waiting in: idle (a keep-alive connection between requests) or new (no request head a second after connecting); the one that waited longest goes first.",
	}, []string{"state"})
	return &metrics{
		maxConns: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_httpapi_max_connections",
			Help: "The connection cap in force on the API port (--max-connections, or derived from the open-file limit; 0: none).",
		}),
		connsRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_httpapi_connections_refused_total",
			Help: "Connections refused with 503 at --max-connections, every open one being busy with a request (or new within the last second).",
		}),
		connsClosedIdle: closed.WithLabelValues("idle"),
		connsClosedNew:  closed.WithLabelValues("new"),
		acceptErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_httpapi_accept_errors_total",
			Help: "Accepts on the API port that failed (out of file descriptors, say), each retried after a backoff of 5 ms doubling up to 1 s.",
		}),
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

// connEvent counts what the API port's cap reports.
func (m *metrics) connEvent(e portcap.Event) {
	switch e {
	case portcap.Refused:
		m.connsRefused.Inc()
	case portcap.ClosedIdle:
		m.connsClosedIdle.Inc()
	case portcap.ClosedNew:
		m.connsClosedNew.Inc()
	case portcap.AcceptFailed:
		m.acceptErrors.Inc()
	}
}
