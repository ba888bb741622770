package wsnode

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/headcount/headcount/pkg/wsfront"
)

// frameType is a type of frame counted in frames_received_total. The set
// is fixed, so a client cannot create label values, and each value's
// counter is registered up front: the socket path does no label lookups.
type frameType uint8

const (
	frameMalformed frameType = iota
	frameBinary
	framePing
	framePong
	frameSubscribe
	frameUnsubscribe
	frameSignin
	frameClientEvent
	frameOther
	frameTypeCount // the number of frame types; not a type
)

// frameLabels are the frame types' label values.
var frameLabels = [frameTypeCount]string{
	frameMalformed:   "malformed",
	frameBinary:      "binary",
	framePing:        "ping",
	framePong:        "pong",
	frameSubscribe:   "subscribe",
	frameUnsubscribe: "unsubscribe",
	frameSignin:      "signin",
	frameClientEvent: "client_event",
	frameOther:       "other",
}

func (t frameType) String() string { return frameLabels[t] }

// reason is why a connection or a request was refused, or a connection
// failed: the reason label of errors_total. Counters are indexed by it, so
// a reason that has no counter cannot be written (a constant index out of
// range does not compile), and every reason's counter exists from the
// start, at zero.
type reason uint8

const (
	reasonAppNotFound reason = iota
	reasonAppDisabled
	reasonBadProtocol
	reasonMalformed
	reasonInvalidChannel
	reasonChannelLimit
	reasonUnsupportedEvent
	reasonFrameTooBig
	reasonWrite
	reasonIdle
	reasonWriteTimeout
	reasonDrainForcedClosed
	reasonConnectionLimit
	reasonAuth
	reasonPresenceLimit
	reasonRedis
	reasonClientEvent
	reasonPublish
	reasonAccept
	reasonHandshake
	reasonNotAuthorized
	reasonSocketCap
	reasonWatchlistLimit
	reasonOrigin
	reasonInvalidUTF8
	reasonAlreadySubscribed
	reasonFrameRate
	reasonAppChannelLimit
	reasonCount // the number of reasons; not a reason
)

// reasonLabels are the reasons' label values: dashboards and alerts select
// on them, so they do not change.
var reasonLabels = [reasonCount]string{
	reasonAppNotFound:       "app_not_found",
	reasonAppDisabled:       "app_disabled",
	reasonBadProtocol:       "bad_protocol",
	reasonMalformed:         "malformed_frame",
	reasonInvalidChannel:    "invalid_channel",
	reasonChannelLimit:      "channel_limit",
	reasonUnsupportedEvent:  "unsupported_event",
	reasonFrameTooBig:       "frame_too_big",
	reasonWrite:             "write",
	reasonIdle:              "idle_timeout",
	reasonWriteTimeout:      "write_timeout",
	reasonDrainForcedClosed: "drain_forced_close",
	reasonConnectionLimit:   "connection_limit",
	reasonAuth:              "auth",
	reasonPresenceLimit:     "presence_limit",
	reasonRedis:             "redis",
	reasonClientEvent:       "client_event_refused",
	reasonPublish:           "publish",
	reasonAccept:            "accept",
	reasonHandshake:         "handshake_refused",
	reasonOrigin:            "origin_not_allowed",
	reasonNotAuthorized:     "user_auth_timeout",
	reasonSocketCap:         "socket_cap",
	reasonWatchlistLimit:    "watchlist_limit",
	reasonInvalidUTF8:       "invalid_utf8",
	reasonAlreadySubscribed: "already_subscribed",
	reasonFrameRate:         "frame_rate",
	reasonAppChannelLimit:   "app_channel_limit",
}

func (r reason) String() string { return reasonLabels[r] }

// frontReason is the reason a refusal or failure of the WebSocket port's
// front is counted under.
func frontReason(r wsfront.Reason) reason {
	switch r {
	case wsfront.AcceptFailed:
		return reasonAccept
	case wsfront.AtCap:
		return reasonSocketCap
	default: // wsfront.Refused: an HTTP error answered to a request
		return reasonHandshake
	}
}

// closeCodes are the close codes disconnects_total counts under their
// own label, each from the start: RFC 6455's (1000 and 1001 a client
// leaving, 1002, 1007 and 1009 frames the node refuses, 1005 a close frame
// without a code, 1006 no close frame at all, 1008 and 1011 what proxies
// send) and the Pusher codes the node closes with. A client may close with
// any code: one outside these counts as "other", so no client creates a
// series.
var closeCodes = []uint16{1000, 1001, 1002, closeNoStatus, closeAbnormal, 1007, 1008, 1009, 1011,
	4001, 4003, 4004, 4007, 4008, 4009, 4100, 4200, 4201}

type metrics struct {
	open          prometheus.Gauge
	total         prometheus.Counter
	subscriptions prometheus.Gauge
	received      [frameTypeCount]prometheus.Counter
	errors        [reasonCount]prometheus.Counter
	// sent counts frames written to sockets; busIn messages the bus
	// delivered to this node; clientEvents client events published.
	sent         prometheus.Counter
	busIn        prometheus.Counter
	clientEvents prometheus.Counter
	// slow counts sockets disconnected because their send queue was full.
	slow prometheus.Counter
	// terminated counts sockets closed by terminate_connections.
	terminated prometheus.Counter
	// appsClosed counts sockets closed because a reload of the apps
	// removed (4001) or disabled (4003) their app.
	appsRemoved, appsDisabled prometheus.Counter
	// watchlist counts pusher_internal:watchlist_events frames queued, by
	// why: a signin's first status, or an online or offline edge.
	watchlistFirst, watchlistEdge prometheus.Counter
	// batch is how many queued frames a writer wrote in one turn: how
	// much sends coalesce under load.
	batch prometheus.Histogram
	// waits counts writes that found the socket's buffer full and were
	// finished by a goroutine of the socket's own.
	waits prometheus.Counter
	// maxSockets is the socket cap in force.
	maxSockets prometheus.Gauge
	// superseded counts subscription counts not delivered because a later
	// count of the channel was delivered first.
	superseded prometheus.Counter
	// resumes, replayed, resumeFailed and rewindAbandoned count the
	// replays of channel history (replay.go).
	resumes, replayed, resumeFailed, rewindAbandoned prometheus.Counter
	// disconnects counts ended sockets by close code (closeCodes), the
	// rest in disconnectsOther.
	disconnects      map[uint16]prometheus.Counter
	disconnectsOther prometheus.Counter
}

// disconnected counts a socket that ended with code.
func (m *metrics) disconnected(code uint16) {
	if c, ok := m.disconnects[code]; ok {
		c.Inc()
		return
	}
	m.disconnectsOther.Inc()
}

// newMetrics registers the node's metrics; portConns reads the number of
// connections open on the WebSocket port, ready what /readyz reports,
// anchored whether the node's exit anchor lives.
func newMetrics(reg prometheus.Registerer, portConns func() float64, ready, anchored func() bool) *metrics {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_wsnode_port_connections",
		Help: "Connections open on the WebSocket port, handshaking or upgraded: what --max-sockets caps.",
	}, portConns)
	// Read at each scrape, so alerts see what /readyz answers (a probe's
	// failures are seen only by the prober).
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_wsnode_ready",
		Help: "1 while /readyz answers 200 (the node takes sockets, its counts and pub/sub reach Redis, its apps are loaded), else 0.",
	}, func() float64 { return map[bool]float64{true: 1}[ready()] })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headcount_wsnode_exit_anchored",
		Help: "1 while the node's exit anchor lives (wsnode-anchor), so a kill ends its Redis and admin connections at once (--exit-anchor); 0 when off, unavailable (Linux on amd64 only) or ended (the log says why).",
	}, func() float64 { return map[bool]float64{true: 1}[anchored()] })
	watchlistEvents := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_watchlist_events_total",
		Help: "pusher_internal:watchlist_events frames queued to signed-in sockets, by why: a signin's first status (signin) or a watched user's online or offline edge (edge).",
	}, []string{"why"})
	appsClosed := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_closed_by_apps_reload_total",
		Help: "Sockets closed because a reload of the apps removed their app (app_removed, 4001) or disabled it (app_disabled, 4003).",
	}, []string{"reason"})
	m := &metrics{
		maxSockets: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_wsnode_max_sockets",
			Help: "The socket cap in force (--max-sockets, or derived from the open-file limit; 0: none): connections past it are refused with 503.",
		}),
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
		sent: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_frames_sent_total",
			Help: "Frames written to sockets (replies and deliveries).",
		}),
		busIn: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_messages_delivered_total",
			Help: "Messages the event bus delivered to this node (each is written to every local subscriber).",
		}),
		clientEvents: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_client_events_total",
			Help: "Client events accepted and published.",
		}),
		slow: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_slow_consumers_total",
			Help: "Sockets disconnected because their send queue was full.",
		}),
		terminated: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_terminated_total",
			Help: "Sockets closed (4009) by the HTTP API's terminate_connections for their signed-in user.",
		}),
		appsRemoved:    appsClosed.WithLabelValues("app_removed"),
		appsDisabled:   appsClosed.WithLabelValues("app_disabled"),
		watchlistFirst: watchlistEvents.WithLabelValues("signin"),
		watchlistEdge:  watchlistEvents.WithLabelValues("edge"),
		batch: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "headcount_wsnode_write_batch_frames",
			Help:    "Frames a writer wrote to one socket in one turn.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		waits: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_write_waits_total",
			Help: "Writes that found the client's socket buffer full: a goroutine of the socket's own waited for room (the write timeout bounds it) while the writers went on.",
		}),
		superseded: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_counts_superseded_total",
			Help: "Subscription counts not delivered because a later count of the same channel (announced by another process, or sooner) was delivered first.",
		}),
		resumes: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_resumes_total",
			Help: "Subscribes to a history channel by a page that connected with a resume id and had acknowledged the channel's events: it is sent what followed them.",
		}),
		replayed: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_replayed_events_total",
			Help: "History events sent to new subscribers, by rewind or resume.",
		}),
		resumeFailed: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_resume_failed_total",
			Help: "headcount:resume_failed sent: a resumed subscriber missed events the history no longer holds (or could not be read).",
		}),
		rewindAbandoned: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_wsnode_replays_abandoned_total",
			Help: "Replays of history given up because more live events arrived during them than a subscriber's hold takes; live events went on.",
		}),
	}
	// Children are resolved once so the socket path does no label lookups.
	frames := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_frames_received_total",
		Help: "Frames received from clients, by type.",
	}, []string{"type"})
	for t, label := range frameLabels {
		m.received[t] = frames.WithLabelValues(label)
	}
	errs := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_errors_total",
		Help: "Refused connections, refused requests and connection failures, by reason.",
	}, []string{"reason"})
	for r, label := range reasonLabels {
		m.errors[r] = errs.WithLabelValues(label)
	}
	disconnects := f.NewCounterVec(prometheus.CounterOpts{
		Name: "headcount_wsnode_disconnects_total",
		Help: "WebSocket connections ended, by close code: the close frame the node sent (its own, or its answer to the client's), else the client's, else 1006 (the connection ended without one); a code outside the usual set counts as other.",
	}, []string{"code"})
	m.disconnects = make(map[uint16]prometheus.Counter, len(closeCodes))
	for _, c := range closeCodes {
		m.disconnects[c] = disconnects.WithLabelValues(strconv.Itoa(int(c)))
	}
	m.disconnectsOther = disconnects.WithLabelValues("other")
	return m
}
