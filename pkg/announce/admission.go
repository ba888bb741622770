package announce

import (
	"context"
	"slices"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/webhook"
)

// eventListMoved is the notice on protocol.AdmissionChannel that a
// channel's waiting list moved: the nodes holding its waiters check in.
const eventListMoved = "moved"

// Admission announces one gate call on app's channel ch: st and c as the
// call returned them, direct a user it admitted without waiting (or "").
// It records the call's metrics, appends the admission webhooks the app
// asks for, and tells the nodes when someone was admitted, struck or
// freed, or when notify is set (a waiter left, so the ones behind moved).
// Both the webhook log and the notice are best effort: a failure is
// logged, and nodes also check in periodically.
func (a *Announcer) Admission(ctx context.Context, app *apps.App, ch string, st admission.State, c admission.Changes, direct string, notify bool) {
	admitted := c.Promoted
	if direct != "" {
		a.opts.Metrics.AdmittedDirectly(app.ID)
		admitted = append(slices.Clone(admitted), direct)
	}
	a.opts.Metrics.Observe(app.ID, ch, st, c)
	if evs := admissionEvents(app, ch, admitted, c.Dropped); len(evs) > 0 {
		if _, err := webhook.Append(ctx, a.opts.Redis, a.opts.Keyspace, app, evs...); err != nil {
			a.log.Warn("cannot log admission webhook events", "app", app.ID, "channel", ch, "events", len(evs), "error", err)
		}
	}
	if !notify && !c.Moved() {
		return
	}
	if err := a.opts.Bus.Publish(ctx, app.ID, fanout.Message{Channel: protocol.AdmissionChannel(ch), Event: eventListMoved}); err != nil {
		a.log.Debug("cannot tell nodes the waiting list moved", "app", app.ID, "channel", ch, "error", err)
	}
}

// admissionEvents are the admission webhooks app asks for, of one gate
// call's outcome: users admitted and waiters struck.
func admissionEvents(app *apps.App, channel string, admitted, dropped []string) []webhook.Event {
	var evs []webhook.Event
	if webhook.Wants(app, webhook.AdmissionAdmitted) {
		for _, u := range admitted {
			evs = append(evs, webhook.Event{Name: webhook.AdmissionAdmitted, Channel: channel, UserID: u})
		}
	}
	if webhook.Wants(app, webhook.AdmissionDropped) {
		for _, u := range dropped {
			evs = append(evs, webhook.Event{Name: webhook.AdmissionDropped, Channel: channel, UserID: u})
		}
	}
	return evs
}
