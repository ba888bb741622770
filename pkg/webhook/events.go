package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
)

// Event names, as the event log (package eventlog) spells them.
const (
	ChannelOccupied   = eventlog.ChannelOccupied
	ChannelVacated    = eventlog.ChannelVacated
	MemberAdded       = eventlog.MemberAdded
	MemberRemoved     = eventlog.MemberRemoved
	ClientEvent       = eventlog.ClientEvent
	SubscriptionCount = eventlog.SubscriptionCount
	CacheMiss         = eventlog.CacheMiss
	AdmissionAdmitted = eventlog.AdmissionAdmitted
	AdmissionDropped  = eventlog.AdmissionDropped
)

// Event is one webhook event as Pusher sends it. Data of a client_event is
// the client's data as a string (pusher-http-go decodes it into a string).
type Event struct {
	Name              string `json:"name"`
	Channel           string `json:"channel"`
	UserID            string `json:"user_id,omitempty"`
	Event             string `json:"event,omitempty"`
	Data              string `json:"data,omitempty"`
	SocketID          string `json:"socket_id,omitempty"`
	SubscriptionCount *int64 `json:"subscription_count,omitempty"`
}

// Wants reports whether any of app's webhooks asks for events named name.
func Wants(app *apps.App, name string) bool {
	if app == nil {
		return false
	}
	for _, w := range app.Webhooks {
		if wantsType(w, name) {
			return true
		}
	}
	return false
}

// wantsEvent reports whether any of hooks asks for ev: its type, and its
// channel through the webhook's filter.
func wantsEvent(hooks []apps.Webhook, ev Event) bool {
	for _, w := range hooks {
		if wantsType(w, ev.Name) && w.Filter.Matches(ev.Channel) {
			return true
		}
	}
	return false
}

func wantsType(w apps.Webhook, name string) bool {
	for _, t := range w.EventTypes {
		if t == name {
			return true
		}
	}
	return false
}

// LogsOccupancy reports whether app's count updates must append their
// edges to its event log (counts.RecorderOptions.LogEvents).
func LogsOccupancy(app *apps.App) bool {
	return Wants(app, ChannelOccupied) || Wants(app, ChannelVacated) || Wants(app, MemberAdded) || Wants(app, MemberRemoved)
}

// Append adds events to app's event log in ks, where the deliverers find
// them after the count scripts' own. Callers check Wants first, so apps without
// webhooks write nothing. The events are not held to the log's byte budget
// (see LogBudget): Append's callers log changes already made (admission),
// few and small, whose webhooks must not be lost.
func Append(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, app string, events ...Event) error {
	_, err := appendEvents(ctx, rdb, eventlog.For(ks, app), 0, events)
	return err
}

// appendEvents appends events to log, client events held to budget (0:
// none), and returns how many were refused for it.
func appendEvents(ctx context.Context, rdb redis.UniversalClient, log eventlog.Log, budget int64, events []Event) (refused int, err error) {
	if len(events) == 0 {
		return 0, nil
	}
	entries := make([]eventlog.Entry, len(events))
	for i, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			return 0, fmt.Errorf("webhook log of app %s: %w", log.App, err)
		}
		entries[i] = eventlog.Entry{JSON: string(b), Bounded: clientDriven(ev.Name)}
	}
	refused, _, err = log.Append(ctx, rdb, budget, entries...)
	if err != nil {
		return 0, fmt.Errorf("webhook log of app %s: %w", log.App, err)
	}
	return refused, nil
}

// clientDriven reports whether events named name come at a rate clients
// choose: client events, and cache misses (a client may subscribe to one
// new empty cache channel after another). Those are held to the log's
// byte budget.
func clientDriven(name string) bool { return name == ClientEvent || name == CacheMiss }

// DefaultLogBudget is the byte budget of an app's event log unless its
// maxWebhookLogSizeInMb says otherwise: 64 MiB. It holds a whole retry
// window (5 min) of client events at 1,000 a second of about 200 bytes, or
// 6,500 of the largest (10 KB); and it bounds what client events can add to
// an app's log in Redis at 64 MiB, beside the 98.6 MB docs/SCALING.md
// reserves for occupancy events at the million-entry cap, where without it
// they could reach 10 GB.
const DefaultLogBudget = 64 << 20

// LogBudget returns the bytes app's event log may hold before client
// events are refused: maxWebhookLogSizeInMb MiB, or DefaultLogBudget.
//
// Only client events are held to it: their size (up to 10 KB) and rate are
// the clients' to choose, so they are what can fill the log while a
// client_event webhook fails. Occupancy and member events (written by the
// count scripts with the count change), subscription counts and admission
// events record changes of state, are small and as frequent as those
// changes; they always get in and count toward the budget, and the log's
// entry cap bounds them.
func LogBudget(app *apps.App) int64 {
	if app != nil && app.MaxWebhookLogSizeInMb > 0 {
		return max(int64(app.MaxWebhookLogSizeInMb*(1<<20)), 1)
	}
	return DefaultLogBudget
}

// Sign is X-Pusher-Signature: hex HMAC-SHA256 of the exact body under the
// app's secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
