package apps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// App is one tenant: its credentials and limits. Zero limits mean the
// protocol's defaults.
type App struct {
	ID string
	// Key and Secret are the app's first key pair: the one webhooks are
	// signed with and the dashboard signs its requests with.
	Key    string
	Secret string
	// Keys are the app's further key pairs (the apps field keys), each as
	// good as the first for clients, signatures and the HTTP API: a secret
	// is rotated by adding a pair, rolling clients and servers onto it,
	// then removing the old one.
	Keys []KeyPair
	// Enabled is false for an app whose clients are refused (4003, HTTP 403).
	Enabled bool

	EnableClientMessages         bool
	EnableUserAuthentication     bool
	EnableSubscriptionCount      bool
	MaxConnections               int
	MaxPresenceMembersPerChannel int
	MaxPresenceMemberSizeInKb    float64
	MaxEventPayloadInKb          float64
	MaxEventBatchSize            int
	MaxEventChannelsAtOnce       int
	// MaxWebhookLogSizeInMb bounds, in MiB, the app's webhook event log:
	// once it holds this much, client events are no longer logged for the
	// client_event webhook (see webhook.LogBudget). Zero means the default.
	MaxWebhookLogSizeInMb float64

	// MaxClientEventsPerSecond is each socket's client-event rate; zero
	// means DefaultClientEventsPerSecond, a negative value no limit.
	MaxClientEventsPerSecond int
	// MaxBackendEventsPerSecond bounds the events published through the
	// HTTP API per second, cluster-wide, each channel of each event
	// counting one; zero or negative means no limit.
	MaxBackendEventsPerSecond int
	// MaxReadRequestsPerSecond bounds the HTTP API's GET requests per
	// second, cluster-wide; zero or negative means no limit.
	MaxReadRequestsPerSecond int
	// MaxChannelNameLength is the longest channel name, in bytes, clients
	// may subscribe to and the HTTP API may use; zero means
	// protocol.MaxChannelNameLength.
	MaxChannelNameLength int
	// AllowedOrigins lists the browser origins whose WebSocket upgrades
	// are accepted (see AllowsOrigin); nil allows every origin.
	AllowedOrigins []string
	// MaxChannelsPerConnection caps one connection's subscriptions; zero
	// means DefaultMaxChannelsPerConnection (ChannelsPerConnection).
	MaxChannelsPerConnection int
	// MaxChannels caps the app's occupied channels cluster-wide; zero
	// means DefaultMaxChannels, a negative value no limit (ChannelLimit).
	MaxChannels int

	Webhooks   []Webhook
	Capacities []Capacity
	// History gives channels a history (package history); nil: none.
	History   []History
	Admission Admission
}

// KeyPair is one key and the secret that signs for it.
type KeyPair struct {
	Key    string `json:"key"`
	Secret string `json:"secret"`
}

// SecretFor returns the secret of the app's key pair whose key is key.
func (a *App) SecretFor(key string) (string, bool) {
	if key == a.Key {
		return a.Secret, true
	}
	for _, p := range a.Keys {
		if p.Key == key {
			return p.Secret, true
		}
	}
	return "", false
}

// keyPairs returns every key pair of the app, the first pair first.
func (a *App) keyPairs() []KeyPair {
	return append([]KeyPair{{a.Key, a.Secret}}, a.Keys...)
}

// Capacity limits admission to channels whose name starts with Prefix.
type Capacity struct {
	Prefix   string `json:"prefix"`
	Capacity int    `json:"capacity"`
}

// History keeps the last events of channels whose name starts with
// Prefix (the longest matching prefix wins, see Longest): at most Events of
// them, none older than Seconds. Rewind is how many of them a new
// subscriber is sent first (used by rewind on subscribe); 0: none.
type History struct {
	Prefix  string `json:"prefix"`
	Events  int    `json:"events"`
	Seconds int    `json:"seconds"`
	Rewind  int    `json:"rewind"`
}

// Admission holds the timings of the admission waiting list, in seconds.
type Admission struct {
	DropoutSeconds int `json:"dropoutSeconds"`
	GraceSeconds   int `json:"graceSeconds"`
	TicketSeconds  int `json:"ticketSeconds"`
}

// Defaults used when no apps file is given: the same as soketi's.
const (
	DefaultID     = "app-id"
	DefaultKey    = "app-key"
	DefaultSecret = "app-secret"
)

// idPattern keeps app ids usable as a Redis hash tag and in URL paths.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func (a *App) validate() error {
	var errs []error
	if !idPattern.MatchString(a.ID) {
		errs = append(errs, fmt.Errorf("id %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", a.ID))
	}
	for i, p := range a.keyPairs() {
		at := ""
		if i > 0 {
			at = fmt.Sprintf("keys[%d]: ", i-1)
		}
		if err := checkKey(p.Key); err != nil {
			errs = append(errs, fmt.Errorf("app %q: %s%w", a.ID, at, err))
		}
		if err := checkSecret(p.Secret); err != nil {
			errs = append(errs, fmt.Errorf("app %q: %s%w", a.ID, at, err))
		}
	}
	errs = append(errs, a.validateCapacities()...)
	errs = append(errs, a.validateHistory()...)
	if err := validateWebhooks(a.Webhooks); err != nil {
		errs = append(errs, fmt.Errorf("app %q: %w", a.ID, err))
	}
	errs = append(errs, a.validateLimits()...)
	errs = append(errs, a.validateChannels()...)
	if a.MaxWebhookLogSizeInMb < 0 {
		errs = append(errs, fmt.Errorf("app %q: maxWebhookLogSizeInMb must not be negative, not %g", a.ID, a.MaxWebhookLogSizeInMb))
	}
	for name, v := range map[string]int{"dropoutSeconds": a.Admission.DropoutSeconds, "graceSeconds": a.Admission.GraceSeconds, "ticketSeconds": a.Admission.TicketSeconds} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("app %q: admission.%s must not be negative, not %d", a.ID, name, v))
		}
	}
	return errors.Join(errs...)
}

// Parse decodes an apps file: a JSON array of app objects. Field names are
// matched without regard to case or underscores, so soketi's camelCase and
// snake_case spellings both work. A field of soketi's that headcount does
// not implement is ignored with a warning (Registry.Warnings); any other
// unknown field, a typo most likely, is an error naming it and the app.
//
// A JSON object instead is read as a soketi config file: its apps are
// appManager.array.apps, and each of its other settings is named in a
// warning, with headcount's equivalent where there is one.
func Parse(b []byte) (*Registry, error) {
	var raw []map[string]json.RawMessage
	var warnings []string
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		var err error
		if raw, warnings, err = parseSoketiConfig(b); err != nil {
			return nil, err
		}
	} else if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("apps file must be a JSON array of apps, or a soketi config object: %w", err)
	}
	r, err := Decode(raw)
	if r != nil {
		r.cur.Load().warnings = append(warnings, r.Warnings()...)
	}
	return r, err
}

// Decode builds a registry from app objects, each a field name and its JSON
// value, as an apps file holds them (see Parse for how names match): the
// one way apps come in, whatever their source (a file, a database row).
func Decode(raw []map[string]json.RawMessage) (*Registry, error) {
	var warnings []string
	list := make([]*App, 0, len(raw))
	var errs []error
	for i, fields := range raw {
		a, warned, appErrs := decodeApp(fields)
		warnings = append(warnings, warned...)
		for _, err := range appErrs {
			errs = append(errs, fmt.Errorf("app %d (id %q): %w", i, a.ID, err))
		}
		if len(appErrs) > 0 {
			continue
		}
		list = append(list, a)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	r, err := New(list)
	if r != nil {
		r.cur.Load().warnings = warnings
	}
	return r, err
}

func canonical(name string) string {
	// Most names are canonical already (a database's columns, lower-case
	// field names): returned as they are, without an allocation, since
	// every field of every app comes through here on each reload.
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '_' || ('A' <= c && c <= 'Z') {
			return strings.ToLower(strings.ReplaceAll(name, "_", ""))
		}
	}
	return name
}

// decodeApp decodes one app object; its errors are each about one field.
func decodeApp(fields map[string]json.RawMessage) (*App, []string, []error) {
	f, spelled, errs := appFields(fields)
	a := &App{Enabled: true}
	used := map[string]bool{}
	var ignored []string // nested fields ignored, by path
	get := func(name string, dst any) {
		c := canonical(name)
		used[c] = true
		v, ok := f[c]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return
		}
		v, skipped, err := normalizeKeys(v, reflect.TypeOf(dst).Elem(), name)
		ignored = append(ignored, skipped...)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if s, isString := dst.(*string); isString && len(v) > 0 && v[0] != '"' {
			// ids and keys are sometimes written as numbers.
			var n json.Number
			if json.Unmarshal(v, &n) == nil {
				*s = n.String()
				return
			}
		}
		if err := json.Unmarshal(v, dst); err != nil {
			errs = append(errs, fmt.Errorf("field %s: %w", name, err))
		}
	}
	get("id", &a.ID)
	get("key", &a.Key)
	get("secret", &a.Secret)
	get("keys", &a.Keys)
	get("enabled", &a.Enabled)
	get("enableClientMessages", &a.EnableClientMessages)
	get("enableUserAuthentication", &a.EnableUserAuthentication)
	get("enableSubscriptionCount", &a.EnableSubscriptionCount)
	get("maxConnections", &a.MaxConnections)
	get("maxPresenceMembersPerChannel", &a.MaxPresenceMembersPerChannel)
	get("maxPresenceMemberSizeInKb", &a.MaxPresenceMemberSizeInKb)
	get("maxEventPayloadInKb", &a.MaxEventPayloadInKb)
	get("maxEventBatchSize", &a.MaxEventBatchSize)
	get("maxEventChannelsAtOnce", &a.MaxEventChannelsAtOnce)
	get("maxWebhookLogSizeInMb", &a.MaxWebhookLogSizeInMb)
	get("webhooks", &a.Webhooks)
	get("capacities", &a.Capacities)
	get("history", &a.History)
	get("admission", &a.Admission)
	get("maxClientEventsPerSecond", &a.MaxClientEventsPerSecond)
	get("maxBackendEventsPerSecond", &a.MaxBackendEventsPerSecond)
	get("maxReadRequestsPerSecond", &a.MaxReadRequestsPerSecond)
	get("maxChannelNameLength", &a.MaxChannelNameLength)
	get("allowedOrigins", &a.AllowedOrigins)
	get("maxChannelsPerConnection", &a.MaxChannelsPerConnection)
	get("maxChannels", &a.MaxChannels)
	warnings, err := leftoverFields(a.ID, f, spelled, used, ignored)
	if err != nil {
		errs = append(errs, err)
	}
	return a, warnings, errs
}
