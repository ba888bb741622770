package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
)

// Event names (PUSHER-PROTOCOL.md section 4, and headcount's own admission
// events from CONTRACT.md).
const (
	ChannelOccupied   = "channel_occupied"
	ChannelVacated    = "channel_vacated"
	MemberAdded       = "member_added"
	MemberRemoved     = "member_removed"
	ClientEvent       = "client_event"
	SubscriptionCount = "subscription_count"
	AdmissionAdmitted = "admission_admitted"
	AdmissionDropped  = "admission_dropped"
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

// Append adds events to app's event log, where the deliverers find them
// after the count scripts' own. Callers check Wants first, so apps without
// webhooks write nothing.
func Append(ctx context.Context, rdb redis.UniversalClient, app string, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	t := strconv.FormatInt(time.Now().UnixMilli(), 10)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, ev := range events {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			p.XAdd(ctx, &redis.XAddArgs{Stream: counts.EventLogKey(app), MaxLen: maxLogLen, Approx: true, Values: []any{"t", t, "ev", string(b)}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("webhook log of app %s: %w", app, err)
	}
	return nil
}

// maxLogLen caps the event log like the count scripts do.
const maxLogLen = 1_000_000

// Sign is X-Pusher-Signature: hex HMAC-SHA256 of the exact body under the
// app's secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
