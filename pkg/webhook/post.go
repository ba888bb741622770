package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// minBackoff and maxBackoff bound the wait before a failed attempt's
// events are retried (settle).
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// post makes one delivery attempt of a batch: one POST carrying its
// events, stamped with the first one's creation time.
func (t *target) post(ctx context.Context, batch []*entry) error {
	events := make([]Event, len(batch))
	for i, e := range batch {
		events[i] = e.ev
	}
	body, err := json.Marshal(struct {
		TimeMs int64   `json:"time_ms"`
		Events []Event `json:"events"`
	}{batch[0].t, events})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	// The webhook's own headers first: apps refuses the ones set below, and
	// these would win anyway.
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	// Exactly application/json: the Node SDK refuses anything else.
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Pusher-Key", t.app.Key)
	req.Header.Set("X-Pusher-Signature", Sign(t.app.Secret, body))
	resp, err := t.d.opts.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 3 {
		return &redirectError{status: resp.Status, location: resp.Header.Get("Location")}
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("receiver answered %s", resp.Status)
	}
	return nil
}

// redirectError is a receiver's 3xx. Redirects are never followed: the
// webhook URL is what the app's owner configured, and following a Location
// would let whoever answers there make the deliverer post, signed, to any
// address it can reach, internal ones included (SSRF). A 3xx is a failed
// attempt like any non-2xx, retried and in the end given up.
type redirectError struct{ status, location string }

func (e *redirectError) Error() string {
	return fmt.Sprintf("receiver answered %s redirecting to %q; webhook redirects are not followed, configure the final URL", e.status, e.location)
}

// redirectLogEvery rate-limits the warning about a redirecting receiver to
// one per webhook per period; every attempt still counts as failed.
const redirectLogEvery = time.Minute

// settle records an attempt's outcome and returns the ids to acknowledge:
// the whole batch once delivered; on failure, those past the retry window
// (given up). The others are retried together after one backoff, so a
// failed request's events go out again as one, none acknowledged before.
// Failed and retried count requests; sent and dropped count events.
func (t *target) settle(batch []*entry, err error) (ids []string) {
	app, group := t.app.ID, t.group
	if err == nil {
		for _, e := range batch {
			e.done = true
			t.d.m.sent.WithLabelValues(app, group).Inc()
			t.d.m.latency.WithLabelValues(app, group).Observe(time.Since(time.UnixMilli(e.t)).Seconds())
			ids = append(ids, e.id)
		}
		return ids
	}
	t.d.m.failed.WithLabelValues(app, group).Inc()
	if redirect := (*redirectError)(nil); errors.As(err, &redirect) && time.Since(t.lastRedirectLog) >= redirectLogEvery {
		// Retries are logged at debug only; a redirect is a configuration
		// problem the operator must see, so it gets a warning (at most one a
		// minute per webhook).
		t.lastRedirectLog = time.Now()
		t.log.Warn("webhook receiver redirects; not followed, the delivery failed", "status", redirect.status, "location", redirect.location)
	}
	attempts := 0
	var retry []*entry
	for _, e := range batch {
		e.attempts++
		age := time.Since(time.UnixMilli(e.t))
		if age >= t.d.opts.RetryWindow {
			e.done = true
			// Logged before counted: whoever sees the count finds the line.
			t.log.Error("webhook event given up after the retry window", "event", e.ev.Name, "channel", e.ev.Channel,
				"user_id", e.ev.UserID, "id", e.id, "age", age.Round(time.Millisecond), "attempts", e.attempts, "error", err)
			t.d.m.dropped.WithLabelValues(app, group, "expired").Inc()
			ids = append(ids, e.id)
			continue
		}
		attempts = max(attempts, e.attempts)
		retry = append(retry, e)
	}
	if len(retry) == 0 {
		return ids
	}
	backoff := min(minBackoff<<min(attempts-1, 10), maxBackoff)
	backoff = backoff/2 + rand.N(backoff/2+1)
	next := time.Now().Add(backoff)
	for _, e := range retry {
		e.next = next
	}
	t.d.m.retried.WithLabelValues(app, group).Inc()
	t.log.Debug("webhook delivery failed; will retry", "event", retry[0].ev.Name, "channel", retry[0].ev.Channel, "events", len(retry),
		"attempt", attempts, "in", backoff, "error", err)
	return ids
}
