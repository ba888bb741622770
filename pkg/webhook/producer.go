package webhook

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
)

// producerQueue bounds the events a Producer holds while Redis is slow.
const producerQueue = 10000

// Producer appends events to app logs from callers that must not wait on
// Redis (a socket's handler): Enqueue never blocks, and one goroutine
// writes what was queued in pipelines. When the queue is full (Redis down
// for long), events are dropped with a metric and a log line.
type Producer struct {
	rdb     redis.UniversalClient
	log     hclog.Logger
	q       chan queued
	dropped prometheus.Counter
}

type queued struct {
	app string
	ev  Event
}

// NewProducer returns a producer; Run writes.
func NewProducer(rdb redis.UniversalClient, log hclog.Logger, reg prometheus.Registerer) *Producer {
	return &Producer{rdb: rdb, log: log.Named("webhook"), q: make(chan queued, producerQueue),
		dropped: promauto.With(reg).NewCounter(prometheus.CounterOpts{
			Name: "headcount_webhook_enqueue_dropped_total",
			Help: "Webhook events (client events) dropped before reaching the log because Redis could not take them in time.",
		})}
}

// Enqueue queues ev for app's log without blocking.
func (p *Producer) Enqueue(app string, ev Event) {
	select {
	case p.q <- queued{app, ev}:
	default:
		p.dropped.Inc()
		p.log.Warn("webhook event dropped: the queue to Redis is full", "app", app, "event", ev.Name, "channel", ev.Channel)
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
	byApp := map[string][]Event{}
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
		if err := Append(ctx, p.rdb, app, evs...); err != nil {
			p.dropped.Add(float64(len(evs)))
			p.log.Warn("webhook events dropped: Redis did not take them", "app", app, "events", len(evs), "error", err)
		}
	}
}

// AdmissionEvents are the admission webhooks app asks for, of one gate
// call's outcome: users admitted and waiters struck.
func AdmissionEvents(app *apps.App, channel string, admitted, dropped []string) []Event {
	var evs []Event
	if Wants(app, AdmissionAdmitted) {
		for _, u := range admitted {
			evs = append(evs, Event{Name: AdmissionAdmitted, Channel: channel, UserID: u})
		}
	}
	if Wants(app, AdmissionDropped) {
		for _, u := range dropped {
			evs = append(evs, Event{Name: AdmissionDropped, Channel: channel, UserID: u})
		}
	}
	return evs
}
