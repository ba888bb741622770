// Package apps loads the apps a headcount cluster serves: from an apps file
// (a JSON array in soketi's format, so a soketi app array works unchanged,
// or a soketi config file holding one) or, without one, a single app from
// the environment, under headcount's names or soketi's. A Registry is immutable
// after Load and safe for concurrent use.
package apps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// App is one tenant: its credentials and limits. Zero limits mean the
// protocol's defaults.
type App struct {
	ID     string
	Key    string
	Secret string
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
	Admission  Admission
}

// Capacity limits admission to channels whose name starts with Prefix.
type Capacity struct {
	Prefix   string `json:"prefix"`
	Capacity int    `json:"capacity"`
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

// Registry looks apps up by id and by key.
type Registry struct {
	list  []*App
	byID  map[string]*App
	byKey map[string]*App
	// warnings are the apps file's fields headcount ignores (Warnings).
	warnings []string
}

// ByID returns the app with this id, or nil (also on a nil registry).
func (r *Registry) ByID(id string) *App {
	if r == nil {
		return nil
	}
	return r.byID[id]
}

// ByKey returns the app with this key, or nil (also on a nil registry).
func (r *Registry) ByKey(key string) *App {
	if r == nil {
		return nil
	}
	return r.byKey[key]
}

// All returns every app in file order. The slice must not be modified.
func (r *Registry) All() []*App { return r.list }

// publicSecrets are secrets anyone can read in headcount's own sources:
// DefaultSecret and the placeholder of the example apps files in deploy/.
var publicSecrets = []string{DefaultSecret, "replace-this-secret"}

// WithPublicSecret returns the ids of the apps whose secret is one that
// ships with headcount (DefaultSecret or an example file's placeholder):
// whoever reaches a server holding such an app can sign its API requests
// and channel subscriptions.
func (r *Registry) WithPublicSecret() []string {
	var ids []string
	for _, a := range r.list {
		if slices.Contains(publicSecrets, a.Secret) {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// New builds a registry from apps, checking that each is complete and
// would work (validate: every source of apps, the apps file, a soketi
// config file and the environment, comes through here) and that ids and
// keys are unique.
func New(list []*App) (*Registry, error) {
	r := &Registry{byID: map[string]*App{}, byKey: map[string]*App{}}
	var errs []error
	for i, a := range list {
		if err := a.validate(); err != nil {
			errs = append(errs, fmt.Errorf("app %d: %w", i, err))
			continue
		}
		if r.byID[a.ID] != nil {
			errs = append(errs, fmt.Errorf("app %d: duplicate id %q", i, a.ID))
			continue
		}
		if r.byKey[a.Key] != nil {
			errs = append(errs, fmt.Errorf("app %d: duplicate key %q", i, a.Key))
			continue
		}
		r.byID[a.ID], r.byKey[a.Key] = a, a
		r.list = append(r.list, a)
	}
	if len(list) == 0 {
		errs = append(errs, errors.New("no apps defined"))
	}
	return r, errors.Join(errs...)
}

// idPattern keeps app ids usable as a Redis hash tag and in URL paths.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func (a *App) validate() error {
	var errs []error
	if !idPattern.MatchString(a.ID) {
		errs = append(errs, fmt.Errorf("id %q must be 1-128 characters of A-Z a-z 0-9 . _ : -", a.ID))
	}
	if err := checkKey(a.Key); err != nil {
		errs = append(errs, fmt.Errorf("app %q: %w", a.ID, err))
	}
	if err := checkSecret(a.Secret); err != nil {
		errs = append(errs, fmt.Errorf("app %q: %w", a.ID, err))
	}
	errs = append(errs, a.validateCapacities()...)
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

// LoadFile reads an apps file.
func LoadFile(path string) (*Registry, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's --apps-file setting
	if err != nil {
		return nil, err
	}
	return Parse(b)
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
		r.warnings = append(warnings, r.warnings...)
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
		r.warnings = warnings
	}
	return r, err
}

// Warnings names each field of the apps file that was ignored because
// headcount does not implement it, one sentence per field and app. The
// binaries log them at start.
func (r *Registry) Warnings() []string {
	if r == nil {
		return nil
	}
	return r.warnings
}

func canonical(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", ""))
}

// decodeApp decodes one app object; its errors are each about one field.
func decodeApp(fields map[string]json.RawMessage) (*App, []string, []error) {
	f, spelled, errs := appFields(fields)
	a := &App{Enabled: true}
	used := map[string]bool{}
	var ignored []string // nested fields ignored, by path
	get := func(name string, dst any) {
		used[canonical(name)] = true
		v, ok := f[canonical(name)]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return
		}
		v, skipped, err := normalizeKeys(v, reflect.TypeOf(dst).Elem(), name)
		ignored = append(ignored, skipped...)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if s, isString := dst.(*string); isString {
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
