package webhook

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/keyspace"
)

// producerQueue bounds the events a Producer holds while Redis is slow.
const producerQueue = 10000

// logFullEvery rate-limits the warning that an app's log is full to one
// per app per period; the metric counts every refused event.
const logFullEvery = time.Minute

// Producer appends events to app logs from callers that must not wait on
// Redis (a socket's handler): Enqueue never blocks, and one goroutine
// writes what was queued, one script per app. When the queue is full (Redis down
// for long), events are dropped with a metric and a log line. Events are
// held to the app's log budget (LogBudget): once the log holds that many
// bytes, Redis refuses them, atomically across every node, and they are
// counted in headcount_webhook_events_dropped_total{reason="log_full"}
// with a warning at most once a minute per app (and, with every other
// appender's, in the log's own count).
type Producer struct {
	rdb     redis.UniversalClient
	ks      keyspace.Space
	log     hclog.Logger
	q       chan queued
	dropped prometheus.Counter
	refused *prometheus.CounterVec
	// lastFull is when the log-full warning was last logged, by app id;
	// only Run's goroutine touches it.
	lastFull map[string]time.Time
}

type queued struct {
	app *apps.App
	ev  Event
}

// NewProducer returns a producer of the event logs in ks; Run writes.
func NewProducer(rdb redis.UniversalClient, ks keyspace.Space, log hclog.Logger, reg prometheus.Registerer) *Producer {
	f := promauto.With(reg)
	return &Producer{rdb: rdb, ks: ks, log: log.Named("webhook"), q: make(chan queued, producerQueue), lastFull: map[string]time.Time{},
		dropped: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_webhook_enqueue_dropped_total",
			Help: "Webhook events (client events) dropped before reaching the log because Redis could not take them in time.",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_webhook_events_dropped_total",
			Help: "Webhook events not logged; reason log_full: client events refused because the app's event log held its byte budget (maxWebhookLogSizeInMb).",
		}, []string{"app", "reason"}),
	}
}

// Enqueue queues ev for app's log without blocking. An event no webhook
// of app wants, by type or by its filter, is not logged: client events
// outside every filter would only take the log's byte budget.
func (p *Producer) Enqueue(app *apps.App, ev Event) {
	if !wantsEvent(app.Webhooks, ev) {
		return
	}
	select {
	case p.q <- queued{app, ev}:
	default:
		p.dropped.Inc()
		p.log.Warn("webhook event dropped: the queue to Redis is full", "app", app.ID, "event", ev.Name, "channel", ev.Channel)
	}
}

// Run writes queued events until ctx ends, then what is left, briefly.
func (p *Producer) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), time.Second)
			p.flush(fctx, queued{}, false)
			cancel()
			return
		case first := <-p.q:
			p.flush(ctx, first, true)
		}
	}
}

// flush writes first (if has) and everything queued now, per app.
func (p *Producer) flush(ctx context.Context, first queued, has bool) {
	byApp := map[*apps.App][]Event{}
	if has {
		byApp[first.app] = append(byApp[first.app], first.ev)
	}
	for more := true; more; {
		select {
		case q := <-p.q:
			byApp[q.app] = append(byApp[q.app], q.ev)
		default:
			more = false
		}
	}
	for app, evs := range byApp {
		refused, err := Append(ctx, p.rdb, p.ks, app, evs...)
		if err != nil {
			p.dropped.Add(float64(len(evs)))
			p.log.Warn("webhook events dropped: Redis did not take them", "app", app.ID, "events", len(evs), "error", err)
			continue
		}
		if refused == 0 {
			continue
		}
		p.refused.WithLabelValues(app.ID, "log_full").Add(float64(refused))
		if now := time.Now(); now.Sub(p.lastFull[app.ID]) >= logFullEvery {
			p.lastFull[app.ID] = now
			p.log.Warn("client events not logged for webhooks: the app's event log is full (its webhooks are failing or slow); counted in headcount_webhook_events_dropped_total",
				"app", app.ID, "refused", refused, "budget_bytes", LogBudget(app))
		}
	}
}
