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
	EventsDropped     = eventlog.EventsDropped
)

// markers are the events the count scripts log as markers (eventlog's
// Spec).
var markers = []string{ChannelOccupied, ChannelVacated, MemberAdded, MemberRemoved, SubscriptionCount}

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
	// Dropped and SinceMs are an events_dropped notice's: how many events
	// the app's log refused, the first of them at SinceMs (unix ms).
	Dropped *int64 `json:"dropped,omitempty"`
	SinceMs int64  `json:"since_ms,omitempty"`
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
// channel through the webhook's filter. An events_dropped notice is about
// the whole log, so filters do not apply to it.
func wantsEvent(hooks []apps.Webhook, ev Event) bool {
	for _, w := range hooks {
		if wantsType(w, ev.Name) && (ev.Name == EventsDropped || w.Filter.Matches(ev.Channel)) {
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

// LogSpec is what the count scripts log to app's event log
// (counts.RecorderOptions.LogEvents): the changes its webhooks ask for, as
// markers, held to its LogBudget.
func LogSpec(app *apps.App) eventlog.Spec {
	var names []string
	for _, name := range markers {
		if Wants(app, name) {
			names = append(names, name)
		}
	}
	return eventlog.Spec{Names: names, Budget: LogBudget(app)}
}

// Append adds events to app's event log in ks, where the deliverers find
// them after the count scripts' own, held to the app's LogBudget like every
// event. Callers check Wants first, so apps without webhooks write nothing.
// It returns how many the budget refused.
func Append(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, app *apps.App, events ...Event) (refused int, err error) {
	if len(events) == 0 {
		return 0, nil
	}
	log := eventlog.For(ks, app.ID)
	entries := make([]string, len(events))
	for i, ev := range events {
		b, err := json.Marshal(ev)
		if err != nil {
			return 0, fmt.Errorf("webhook log of app %s: %w", app.ID, err)
		}
		entries[i] = string(b)
	}
	refused, _, err = log.Append(ctx, rdb, LogBudget(app), entries...)
	if err != nil {
		return 0, fmt.Errorf("webhook log of app %s: %w", app.ID, err)
	}
	return refused, nil
}

// DefaultLogBudget is the byte budget of an app's event log unless its
// maxWebhookLogSizeInMb says otherwise: 64 MiB. It holds a whole retry
// window (5 min) of client events at 1,000 a second of about 200 bytes, or
// 6,500 of the largest (10 KB), beside the markers of about 300,000
// channels and members (about 100 bytes each) whose webhooks are behind.
const DefaultLogBudget = 64 << 20

// LogBudget returns the bytes app's event log may hold:
// maxWebhookLogSizeInMb MiB, or DefaultLogBudget.
//
// Every event is held to it, whoever logs it: clients choose the size (up
// to 10 KB) and rate of client events and cache misses, and, through the
// channels they subscribe to, the rate of occupancy changes and counts. A
// marker pending for a channel takes its further changes at no cost (see
// eventlog), so only receivers far behind on many distinct channels fill
// the log with those. An event refused is counted in the log's index, and
// the next one let in is preceded by an events_dropped notice; webhooks that
// ask for it get it, and the deliverers report the count
// (headcount_webhook_log_dropped_total).
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
