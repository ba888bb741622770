package wsnode

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Frame types counted in frames_received_total; a fixed set so a client
// cannot create label values.
const (
	frameMalformed   = "malformed"
	frameBinary      = "binary"
	framePing        = "ping"
	framePong        = "pong"
	frameSubscribe   = "subscribe"
	frameUnsubscribe = "unsubscribe"
	frameSignin      = "signin"
	frameClientEvent = "client_event"
	frameOther       = "other"
)

// Error reasons counted in errors_total.
const (
	errAppNotFound       = "app_not_found"
	errAppDisabled       = "app_disabled"
	errBadProtocol       = "bad_protocol"
	errMalformed         = "malformed_frame"
	errInvalidChannel    = "invalid_channel"
	errUnsupportedChan   = "unsupported_channel"
	errChannelLimit      = "channel_limit"
	errUnsupportedEvent  = "unsupported_event"
	errFrameTooBig       = "frame_too_big"
	errWrite             = "write"
	errIdle              = "idle_timeout"
	errWriteTimeout      = "write_timeout"
	errDrainForcedClosed = "drain_forced_close"
)

type metrics struct {
	open          prometheus.Gauge
	total         prometheus.Counter
	subscriptions prometheus.Gauge
	received      map[string]prometheus.Counter
	errors        map[string]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		open: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_wsnode_connections_open",
			Help: "WebSocket connections currently established (after the Pusher handshake).",
		}),
		total: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_connections_total",
			Help: "WebSocket connections established since start.",
		}),
		subscriptions: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_wsnode_subscriptions",
			Help: "Channel subscriptions currently held by this node's sockets.",
		}),
		received: map[string]prometheus.Counter{},
		errors:   map[string]prometheus.Counter{},
	}
	// Children are resolved once so the socket path does no label lookups.
	frames := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_frames_received_total",
		Help: "Frames received from clients, by type.",
	}, []string{"type"})
	for _, t := range []string{frameMalformed, frameBinary, framePing, framePong, frameSubscribe, frameUnsubscribe, frameSignin, frameClientEvent, frameOther} {
		m.received[t] = frames.WithLabelValues(t)
	}
	errs := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_errors_total",
		Help: "Refused connections, refused requests and connection failures, by reason.",
	}, []string{"reason"})
	for _, r := range []string{errAppNotFound, errAppDisabled, errBadProtocol, errMalformed, errInvalidChannel, errUnsupportedChan,
		errChannelLimit, errUnsupportedEvent, errFrameTooBig, errWrite, errIdle, errWriteTimeout, errDrainForcedClosed} {
		m.errors[r] = errs.WithLabelValues(r)
	}
	return m
}
