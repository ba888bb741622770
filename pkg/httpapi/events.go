package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/httpx"
	"github.com/headcount/headcount/pkg/portcap"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/ratelimit"
)

// Pusher's publishing limits (channels per event, events per batch, payload
// size); an app's MaxEventChannelsAtOnce, MaxEventBatchSize and
// MaxEventPayloadInKb override the last three.
const (
	maxEventNameLength     = 200
	defaultMaxChannels     = 100
	defaultMaxBatchSize    = 10
	defaultMaxEventPayload = 10 << 10
)

func maxChannels(app *apps.App) int {
	if app.MaxEventChannelsAtOnce > 0 {
		return app.MaxEventChannelsAtOnce
	}
	return defaultMaxChannels
}

func maxBatchSize(app *apps.App) int {
	if app.MaxEventBatchSize > 0 {
		return app.MaxEventBatchSize
	}
	return defaultMaxBatchSize
}

func maxEventPayload(app *apps.App) int {
	if app.MaxEventPayloadInKb > 0 {
		return int(app.MaxEventPayloadInKb * 1024)
	}
	return defaultMaxEventPayload
}

// requestError is a refusal found while parsing a body: an HTTP status (400
// or 413) and the message for the client.
type requestError struct {
	code int
	msg  string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// eventBody is one event as clients send it: the body of POST .../events,
// or one item of a batch (which uses channel only).
type eventBody struct {
	Name     string          `json:"name"`
	Data     json.RawMessage `json:"data"`
	Channel  string          `json:"channel"`
	Channels []string        `json:"channels"`
	SocketID string          `json:"socket_id"`
	Info     string          `json:"info"`
}

// event is a validated event: what to publish and which counts to report.
type event struct {
	name, data, socketID string
	// channels are unique, in request order.
	channels []string
	// subs and users are the info attributes asked for.
	subs, users bool
}

func (e *event) wantInfo() bool { return e.subs || e.users }

// parseEvent parses and validates the body of POST /apps/{id}/events.
func parseEvent(body []byte, app *apps.App) (*event, error) {
	var b eventBody
	if err := decodeJSON(body, &b); err != nil {
		return nil, err
	}
	return b.validate(app, "", false)
}

// batchBody is the body of POST /apps/{id}/batch_events.
type batchBody struct {
	Batch []eventBody `json:"batch"`
}

// parseBatch parses and validates a batch; one bad item refuses the whole
// batch, before anything is published.
func parseBatch(body []byte, app *apps.App) ([]*event, error) {
	var b batchBody
	if err := decodeJSON(body, &b); err != nil {
		return nil, err
	}
	switch limit := maxBatchSize(app); {
	case b.Batch == nil:
		return nil, badRequest(`The body must be {"batch":[...events...]}`)
	case len(b.Batch) == 0:
		return nil, badRequest("The batch has no events")
	case len(b.Batch) > limit:
		return nil, badRequest("The batch has %d events, over the limit of %d", len(b.Batch), limit)
	}
	out := make([]*event, len(b.Batch))
	for i := range b.Batch {
		ev, err := b.Batch[i].validate(app, "batch["+strconv.Itoa(i)+"]: ", true)
		if err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

// decodeJSON decodes a body that must be one JSON object.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("The request body is empty: send a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("Malformed JSON body: %v", err)
	}
	return nil
}

// validate checks one event against Pusher's rules and app's limits. where
// prefixes messages (the item of a batch); batch items take one channel.
func (b *eventBody) validate(app *apps.App, where string, batchItem bool) (*event, error) {
	ev := &event{name: b.Name, socketID: b.SocketID}
	switch {
	case b.Name == "":
		return nil, badRequest("%sname is required", where)
	case len(b.Name) > maxEventNameLength:
		return nil, badRequest("%sEvent name is %d bytes long, over the limit of %d", where, len(b.Name), maxEventNameLength)
	case b.Data == nil:
		return nil, badRequest("%sdata is required", where)
	case b.Data[0] != '"':
		return nil, badRequest("%sdata must be a string (JSON-encode objects into a string first)", where)
	}
	if err := json.Unmarshal(b.Data, &ev.data); err != nil {
		return nil, badRequest("%sdata is not a valid JSON string: %v", where, err)
	}
	if limit := maxEventPayload(app); len(ev.data) > limit {
		return nil, &requestError{code: http.StatusRequestEntityTooLarge,
			msg: fmt.Sprintf("%sEvent data is %d bytes, over the limit of %d", where, len(ev.data), limit)}
	}

	channels := b.Channels
	switch {
	case batchItem && b.Channels != nil:
		return nil, badRequest("%sA batch event takes one channel: use channel, not channels", where)
	case b.Channel != "" && b.Channels != nil:
		return nil, badRequest("%sGive either channel or channels, not both", where)
	case b.Channel != "":
		channels = []string{b.Channel}
	case len(b.Channels) == 0:
		return nil, badRequest("%sA channel is required (channel, or channels for several)", where)
	}
	if limit := maxChannels(app); len(channels) > limit {
		return nil, badRequest("%sThe event names %d channels, over the limit of %d", where, len(channels), limit)
	}
	seen := make(map[string]bool, len(channels))
	for _, ch := range channels {
		if err := protocol.ValidateChannelNameMax(ch, app.ChannelNameLimit()); err != nil {
			return nil, badRequest("%sInvalid channel name: %v", where, err)
		}
		if !seen[ch] {
			seen[ch] = true
			ev.channels = append(ev.channels, ch)
		}
	}

	if b.SocketID != "" && !protocol.ValidSocketID(b.SocketID) {
		return nil, badRequest("%sInvalid socket_id %s: it must look like 1234.5678", where, portcap.Clip(b.SocketID))
	}
	for _, attr := range infoAttrs(b.Info) {
		switch attr {
		case "subscription_count":
			ev.subs = true
		case "user_count":
			ev.users = true
		default:
			return nil, badRequest("%sUnsupported info attribute %s: use subscription_count and/or user_count", where, portcap.Clip(attr))
		}
	}
	return ev, nil
}

// counted is the info of one channel in a publish response; a field is
// present only when asked for and applicable.
type counted struct {
	SubscriptionCount *int64 `json:"subscription_count,omitempty"`
	UserCount         *int64 `json:"user_count,omitempty"`
}

// queueCounts queues the reads info asks for on channel, or returns nil
// when there is nothing to read: #server-to-user- channels are not counted
// (wsnode does not record them), and user_count applies to presence
// channels only.
func (a *App) queueCounts(ctx context.Context, p redis.Pipeliner, app string, ev *event, channel string) *counts.PendingCounts {
	kind := protocol.ChannelKind(channel)
	if !ev.wantInfo() || !kind.Counted() || (!ev.subs && !kind.HasMembers()) {
		return nil
	}
	return a.store.QueueCounts(ctx, p, app, channel, ev.users && kind.HasMembers())
}

// result turns a read into the response entry; a failed read leaves the
// counts out: the event was published all the same, and a 5xx would invite
// a retry that publishes it again.
func (a *App) result(r *http.Request, app string, ev *event, pc *counts.PendingCounts) counted {
	var c counted
	if pc == nil {
		return c
	}
	subs, users, err := pc.Result(r.Context())
	if err != nil {
		a.metrics.redisErrors.Inc()
		a.log.Error("count read after publish failed", "path", r.URL.Path, "app_id", app, "error", err)
		return c
	}
	if ev.subs {
		c.SubscriptionCount = &subs
	}
	if ev.users && pc.HasUsers() {
		c.UserCount = &users
	}
	return c
}

// publish sends msgs and, through queue, the count reads in one Redis
// round trip, each cache channel's event written to its cache just before
// its publish; it answers the request itself when publishing failed.
func (a *App) publish(w http.ResponseWriter, r *http.Request, app *apps.App, msgs []fanout.Message, queue func(p redis.Pipeliner, i int)) bool {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	cached := make([]*redis.StatusCmd, len(msgs))
	err := a.bus.PublishBatch(ctx, app.ID, msgs, func(p redis.Pipeliner, i int) {
		if m := &msgs[i]; protocol.IsCacheChannel(m.Channel) {
			cached[i] = a.cache.QueueSet(ctx, p, app.ID, m.Channel, m.Event, m.Data)
		}
		if queue != nil {
			queue(p, i)
		}
	})
	if err == nil {
		a.cacheWritten(r, app, msgs, cached)
		return true
	}
	if r.Context().Err() != nil {
		a.log.Debug("publish abandoned by the client", "path", r.URL.Path, "app_id", app.ID, "error", err)
		return false
	}
	a.metrics.redisErrors.Inc()
	level := a.log.Error
	if !a.redisUp.Ready() {
		level = a.log.Debug // the readiness loop has logged the outage
	}
	level("publish failed", "path", r.URL.Path, "app_id", app.ID, "events", len(msgs), "error", err)
	http.Error(w, "The event could not be published (Redis did not answer); it may or may not have been delivered", http.StatusServiceUnavailable)
	return false
}

// cacheWritten logs the cache writes that failed: the events were
// delivered all the same, so the request succeeds; new subscribers get
// the channel's previous cached event, or a miss.
func (a *App) cacheWritten(r *http.Request, app *apps.App, msgs []fanout.Message, cached []*redis.StatusCmd) {
	for i, c := range cached {
		if c == nil || c.Err() == nil {
			continue
		}
		a.metrics.redisErrors.Inc()
		a.log.Error("cache write after publish failed", "path", r.URL.Path, "app_id", app.ID, "channel", msgs[i].Channel, "error", c.Err())
	}
}

// refuseParse answers a body that parseEvent or parseBatch refused.
func (a *App) refuseParse(w http.ResponseWriter, r *http.Request, err error) {
	var re *requestError
	if !errors.As(err, &re) {
		re = &requestError{code: http.StatusBadRequest, msg: err.Error()}
	}
	httpx.Refuse(a.log, w, r, re.code, re.msg)
}

// triggerEvent serves POST /apps/{app_id}/events: one event on up to 100
// channels, one fanout message per channel, all in one pipeline with the
// counts info asks for.
func (a *App) triggerEvent(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	body := req.body
	ev, err := parseEvent(body, req.app)
	if err != nil {
		a.refuseParse(w, r, err)
		return
	}
	msgs := make([]fanout.Message, len(ev.channels))
	for i, ch := range ev.channels {
		msgs[i] = fanout.Message{Channel: ch, Event: ev.name, Data: ev.data, ExceptSocket: ev.socketID, Keep: req.app.HistoryFor(ch)}
	}
	if !a.allow(w, r, req.app, ratelimit.BackendEvents, len(msgs)) {
		return
	}
	pending := make([]*counts.PendingCounts, len(msgs))
	if !a.publish(w, r, req.app, msgs, func(p redis.Pipeliner, i int) {
		pending[i] = a.queueCounts(r.Context(), p, req.app.ID, ev, msgs[i].Channel)
	}) {
		return
	}
	if !ev.wantInfo() {
		httpx.WriteJSON(w, struct{}{})
		return
	}
	resp := struct {
		Channels map[string]counted `json:"channels"`
	}{Channels: make(map[string]counted, len(msgs))}
	for i, m := range msgs {
		resp.Channels[m.Channel] = a.result(r, req.app.ID, ev, pending[i])
	}
	httpx.WriteJSON(w, resp)
}

// triggerBatch serves POST /apps/{app_id}/batch_events: up to 10 events,
// each on one channel, all in one pipeline. The response is {} unless an
// item asks for info; then {"batch":[...]} aligned with the request (never
// {"batch":{}}, which pusher-http-go cannot decode).
func (a *App) triggerBatch(w http.ResponseWriter, r *http.Request, req *apiRequest) {
	body := req.body
	evs, err := parseBatch(body, req.app)
	if err != nil {
		a.refuseParse(w, r, err)
		return
	}
	msgs := make([]fanout.Message, len(evs))
	anyInfo := false
	for i, ev := range evs {
		msgs[i] = fanout.Message{Channel: ev.channels[0], Event: ev.name, Data: ev.data, ExceptSocket: ev.socketID, Keep: req.app.HistoryFor(ev.channels[0])}
		anyInfo = anyInfo || ev.wantInfo()
	}
	if !a.allow(w, r, req.app, ratelimit.BackendEvents, len(msgs)) {
		return
	}
	pending := make([]*counts.PendingCounts, len(msgs))
	if !a.publish(w, r, req.app, msgs, func(p redis.Pipeliner, i int) {
		pending[i] = a.queueCounts(r.Context(), p, req.app.ID, evs[i], msgs[i].Channel)
	}) {
		return
	}
	if !anyInfo {
		httpx.WriteJSON(w, struct{}{})
		return
	}
	resp := struct {
		Batch []counted `json:"batch"`
	}{Batch: make([]counted, len(evs))}
	for i, ev := range evs {
		resp.Batch[i] = a.result(r, req.app.ID, ev, pending[i])
	}
	httpx.WriteJSON(w, resp)
}
