package admission

import (
	"context"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/webhook"
)

// Reporter records what gate calls did, the same way in every process that
// makes them (httpapi replicas, wsnodes): metrics, the admission webhooks
// the app asks for, and a notice on protocol.AdmissionChannel so the nodes
// holding the channel's connected waiters check where each stands.
type Reporter struct {
	Metrics *Metrics
	rdb     redis.UniversalClient
	bus     *fanout.Bus
	log     hclog.Logger
}

// NewReporter registers the gate's metrics on reg.
func NewReporter(rdb redis.UniversalClient, bus *fanout.Bus, reg prometheus.Registerer, log hclog.Logger) *Reporter {
	return &Reporter{Metrics: NewMetrics(reg), rdb: rdb, bus: bus, log: log}
}

// Report records one gate call on app's channel ch: st and c as the call
// returned them, direct a user it admitted without waiting (or ""). Nodes
// are told when someone was admitted, struck or freed, or when notify is
// set (a waiter left, so the ones behind moved). Both the webhook log and
// the notice are best effort: a failure is logged, and nodes also check in
// periodically.
func (r *Reporter) Report(ctx context.Context, app *apps.App, ch string, st State, c Changes, direct string, notify bool) {
	admitted := c.Promoted
	if direct != "" {
		r.Metrics.AdmittedDirectly(app.ID)
		admitted = append(slices.Clone(admitted), direct)
	}
	r.Metrics.Observe(app.ID, ch, st, c)
	if evs := webhook.AdmissionEvents(app, ch, admitted, c.Dropped); len(evs) > 0 {
		if err := webhook.Append(ctx, r.rdb, app.ID, evs...); err != nil {
			r.log.Warn("cannot log admission webhook events", "app", app.ID, "channel", ch, "events", len(evs), "error", err)
		}
	}
	if !notify && !c.Moved() {
		return
	}
	if err := r.bus.Publish(ctx, app.ID, fanout.Message{Channel: protocol.AdmissionChannel(ch), Event: "moved"}); err != nil {
		r.log.Debug("cannot tell nodes the waiting list moved", "app", app.ID, "channel", ch, "error", err)
	}
}
