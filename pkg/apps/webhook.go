package apps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Webhook is one webhook target of an app, as soketi's apps file spells
// it: {"url", "event_types", "headers", "filter", "batch"}. Its field names
// match without regard to case or underscores, like the app's.
type Webhook struct {
	URL        string
	EventTypes []string
	// Headers are extra HTTP headers sent with each request. None may be
	// one the signature depends on (see reservedHeaders).
	Headers map[string]string
	// Filter limits the webhook to events of matching channels; the zero
	// Filter matches every channel.
	Filter WebhookFilter
	// Batch, when set, lets one request carry several events; nil sends
	// one event per request.
	Batch *WebhookBatch
}

// WebhookFilter is soketi's webhook filter: an event is sent only if its
// channel starts with ChannelNameStartsWith and ends with
// ChannelNameEndsWith (both, when both are set; an empty one is no
// condition).
type WebhookFilter struct {
	ChannelNameStartsWith string
	ChannelNameEndsWith   string
}

// Matches reports whether channel passes the filter. An event without a
// channel passes only a filter without conditions.
func (f WebhookFilter) Matches(channel string) bool {
	return strings.HasPrefix(channel, f.ChannelNameStartsWith) && strings.HasSuffix(channel, f.ChannelNameEndsWith)
}

// WebhookBatch bounds the requests of a batching webhook: at most Size
// events per request, and no event held back more than MaxWait waiting for
// others to fill its request.
type WebhookBatch struct {
	Size    int
	MaxWait time.Duration
}

// Batch defaults and bounds. The default wait is soketi's batching
// duration; the size bound keeps a request of 10 KB client events near
// 10 MB at most.
const (
	DefaultWebhookBatchSize    = 50
	DefaultWebhookBatchMaxWait = 50 * time.Millisecond
	MaxWebhookBatchSize        = 1000
	MaxWebhookBatchMaxWait     = time.Minute
)

// reservedHeaders are set by the deliverer for the request to verify as
// Pusher's (Pusher's SDKs check the exact Content-Type, the key and the
// HMAC of the exact body) or to be framed at all; a webhook's headers may
// not replace them.
var reservedHeaders = []string{"Content-Type", "Content-Length", "Host", "Transfer-Encoding", "X-Pusher-Key", "X-Pusher-Signature"}

// webhookFields are the fields a webhook object may have, canonical.
var webhookFields = []string{"url", "eventtypes", "headers", "filter", "batch", "batching"}

// UnmarshalJSON reads a webhook object. Unknown fields are errors, so that
// neither a misspelt setting nor soketi's AWS Lambda webhooks, which
// headcount does not send, are silently ignored.
func (w *Webhook) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	f := canonicalFields(raw)
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(f)) {
		switch {
		case slices.Contains(webhookFields, k):
		case k == "lambdafunction" || k == "lambda":
			errs = append(errs, fmt.Errorf("%s: AWS Lambda webhooks are not supported; give a url", originalName(raw, k)))
		default:
			errs = append(errs, fmt.Errorf("unknown field %q (known: url, event_types, headers, filter, batch)", originalName(raw, k)))
		}
	}
	get := func(name string, dst any) bool {
		v, ok := f[canonical(name)]
		if !ok || isNull(v) {
			return false
		}
		if err := json.Unmarshal(v, dst); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return false
		}
		return true
	}
	*w = Webhook{}
	get("url", &w.URL)
	get("event_types", &w.EventTypes)
	get("headers", &w.Headers)
	var filter map[string]json.RawMessage
	if get("filter", &filter) {
		errs = append(errs, w.Filter.decode(filter))
	}
	// "batch", or "batching" as soketi names its (server-wide) option.
	var batch, batching map[string]json.RawMessage
	hasBatch, hasBatching := get("batch", &batch), get("batching", &batching)
	switch {
	case hasBatch && hasBatching:
		errs = append(errs, errors.New(`give "batch" or "batching", not both`))
	case hasBatching:
		batch, hasBatch = batching, true
	}
	if hasBatch {
		var err error
		w.Batch, err = decodeBatch(batch)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (f *WebhookFilter) decode(raw map[string]json.RawMessage) error {
	var errs []error
	fields := canonicalFields(raw)
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v := fields[k]
		var dst *string
		switch k {
		case canonical("channel_name_starts_with"):
			dst = &f.ChannelNameStartsWith
		case canonical("channel_name_ends_with"):
			dst = &f.ChannelNameEndsWith
		default:
			errs = append(errs, fmt.Errorf("filter: unknown field %q (known: channel_name_starts_with, channel_name_ends_with)", originalName(raw, k)))
			continue
		}
		if isNull(v) {
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil {
			errs = append(errs, fmt.Errorf("filter.%s: %w", originalName(raw, k), err))
		}
	}
	return errors.Join(errs...)
}

// decodeBatch reads {"size": N, "maxWaitMs": M}, or soketi's batching
// options {"enabled": bool, "duration": ms}; "enabled": false turns
// batching off. Bounds are checked by validate.
func decodeBatch(raw map[string]json.RawMessage) (*WebhookBatch, error) {
	b := &WebhookBatch{Size: DefaultWebhookBatchSize, MaxWait: DefaultWebhookBatchMaxWait}
	enabled := true
	var waitMs *float64
	var errs []error
	f := canonicalFields(raw)
	for _, k := range slices.Sorted(maps.Keys(f)) {
		v, name := f[k], originalName(raw, k)
		if isNull(v) {
			continue
		}
		var err error
		switch k {
		case "size":
			err = json.Unmarshal(v, &b.Size)
		case "maxwaitms", "duration":
			if waitMs != nil {
				errs = append(errs, errors.New(`batch: give "maxWaitMs" or "duration", not both`))
				continue
			}
			waitMs = new(float64)
			err = json.Unmarshal(v, waitMs)
		case "enabled":
			err = json.Unmarshal(v, &enabled)
		default:
			err = fmt.Errorf("unknown field (known: size, maxWaitMs; or soketi's enabled, duration)")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("batch.%s: %w", name, err))
		}
	}
	if waitMs != nil {
		if *waitMs < 0 || *waitMs > float64(MaxWebhookBatchMaxWait.Milliseconds()) {
			errs = append(errs, fmt.Errorf("batch.maxWaitMs must be 0..%d, not %g", MaxWebhookBatchMaxWait.Milliseconds(), *waitMs))
		} else {
			b.MaxWait = time.Duration(*waitMs * float64(time.Millisecond))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !enabled {
		return nil, nil
	}
	return b, nil
}

// validate checks what decoding cannot: bounds, and headers that would
// break the request's signature or framing.
func (w *Webhook) validate() error {
	var errs []error
	if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("url %q must be an absolute http:// or https:// URL", w.URL))
	}
	errs = append(errs, checkEventTypes(w.EventTypes)...)
	for _, name := range slices.Sorted(maps.Keys(w.Headers)) {
		switch {
		case !validHeaderName(name):
			errs = append(errs, fmt.Errorf("headers: %q is not a valid HTTP header name", name))
		case slices.ContainsFunc(reservedHeaders, func(r string) bool { return strings.EqualFold(r, name) }):
			errs = append(errs, fmt.Errorf("headers: %q is set by headcount to sign each request as Pusher does (Content-Type, X-Pusher-Key, X-Pusher-Signature) or to frame it (Content-Length, Host, Transfer-Encoding); remove it", name))
		case !validHeaderValue(w.Headers[name]):
			errs = append(errs, fmt.Errorf("headers: the value of %q holds a control character", name))
		}
	}
	if b := w.Batch; b != nil {
		if b.Size < 1 || b.Size > MaxWebhookBatchSize {
			errs = append(errs, fmt.Errorf("batch.size must be 1..%d, not %d", MaxWebhookBatchSize, b.Size))
		}
		if b.MaxWait < 0 || b.MaxWait > MaxWebhookBatchMaxWait {
			errs = append(errs, fmt.Errorf("batch.maxWaitMs must be 0..%d, not %d", MaxWebhookBatchMaxWait.Milliseconds(), b.MaxWait.Milliseconds()))
		}
	}
	return errors.Join(errs...)
}

// validateWebhooks checks each webhook, and that entries sharing a URL
// (delivered as one target) agree on what is per request.
func validateWebhooks(list []Webhook) error {
	var errs []error
	first := map[string]int{}
	for i, w := range list {
		if err := w.validate(); err != nil {
			errs = append(errs, fmt.Errorf("webhooks[%d]: %w", i, err))
		}
		j, seen := first[w.URL]
		if !seen {
			first[w.URL] = i
			continue
		}
		o := list[j]
		if !maps.Equal(o.Headers, w.Headers) || (o.Batch == nil) != (w.Batch == nil) || (o.Batch != nil && *o.Batch != *w.Batch) {
			errs = append(errs, fmt.Errorf("webhooks[%d]: same url as webhooks[%d] with other headers or batch; one URL is delivered as one webhook, so give them the same", i, j))
		}
	}
	return errors.Join(errs...)
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validHeaderValue refuses control characters (CR and LF would split the
// header), horizontal tab excepted.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func canonicalFields(raw map[string]json.RawMessage) map[string]json.RawMessage {
	f := make(map[string]json.RawMessage, len(raw))
	for k, v := range raw {
		f[canonical(k)] = v
	}
	return f
}

// originalName is the spelling of canonical field k in raw, for messages.
func originalName(raw map[string]json.RawMessage, k string) string {
	for name := range raw {
		if canonical(name) == k {
			return name
		}
	}
	return k
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
