package apps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// soketiEnv maps soketi's default-app environment variables (SOKETI_ and
// this suffix) to the app field each sets: soketi's whole list, all of
// which headcount implements.
var soketiEnv = []struct{ suffix, field string }{
	{"ID", "id"},
	{"KEY", "key"},
	{"SECRET", "secret"},
	{"ENABLED", "enabled"},
	{"ENABLE_CLIENT_MESSAGES", "enableClientMessages"},
	{"USER_AUTHENTICATION", "enableUserAuthentication"},
	{"MAX_CONNS", "maxConnections"},
	{"MAX_BACKEND_EVENTS_PER_SEC", "maxBackendEventsPerSecond"},
	{"MAX_CLIENT_EVENTS_PER_SEC", "maxClientEventsPerSecond"},
	{"MAX_READ_REQ_PER_SEC", "maxReadRequestsPerSecond"},
	{"WEBHOOKS", "webhooks"},
}

// SoketiEnvPrefix starts the names of soketi's default-app variables.
const SoketiEnvPrefix = "SOKETI_DEFAULT_APP_"

// Lookup reads one environment variable, reporting whether it is set at
// all: os.LookupEnv. A variable set to the empty string is set.
type Lookup func(string) (string, bool)

// EnvSet returns the default-app variables that are set to a value:
// headcount's HEADCOUNT_APP_ID, _KEY and _SECRET, then soketi's in soketi's
// order. Beside an apps file they are refused: the file holds every app,
// and soketi would apply its variables to the file's first app, which
// headcount does not do.
func EnvSet(lookup Lookup) []string {
	var set []string
	for _, c := range credentials {
		if v, _ := lookup(OwnEnvPrefix + c.suffix); v != "" {
			set = append(set, OwnEnvPrefix+c.suffix)
		}
	}
	for _, e := range soketiEnv {
		if v, _ := lookup(SoketiEnvPrefix + e.suffix); v != "" {
			set = append(set, SoketiEnvPrefix+e.suffix)
		}
	}
	return set
}

// OwnEnvPrefix starts the names of headcount's default-app variables.
const OwnEnvPrefix = "HEADCOUNT_APP_"

// credentials are the default app's credential variables (OwnEnvPrefix or
// SoketiEnvPrefix and this suffix) and the field each sets.
var credentials = []struct{ suffix, field string }{{"ID", "id"}, {"KEY", "key"}, {"SECRET", "secret"}}

// FromEnv returns the single app of the environment: HEADCOUNT_APP_ID,
// _APP_KEY and _APP_SECRET, or soketi's SOKETI_DEFAULT_APP_* names (which
// also set the app's limits, webhooks and switches), with soketi's defaults
// for what neither sets. The credentials follow checkCredentials. A
// credential set under both names with two values is an error naming both
// variables: serving either one would leave the clients configured with the
// other refused, with nothing at start to say why.
func FromEnv(lookup Lookup) (*Registry, error) {
	getenv := func(name string) string { v, _ := lookup(name); return v }
	fields := map[string]json.RawMessage{}
	errs := checkCredentials(lookup)
	for _, e := range soketiEnv {
		name := SoketiEnvPrefix + e.suffix
		v := getenv(name)
		if v == "" {
			continue
		}
		raw := json.RawMessage(v)
		// soketi reads a value as JSON when it parses as JSON, else as a
		// string; credentials stay strings whatever they look like.
		if e.field == "id" || e.field == "key" || e.field == "secret" || !json.Valid(raw) {
			raw, _ = json.Marshal(v)
		}
		if _, _, fieldErrs := decodeApp(map[string]json.RawMessage{e.field: raw}); len(fieldErrs) > 0 {
			errs = append(errs, fmt.Errorf("%s: %w", name, errors.Join(fieldErrs...)))
			continue
		}
		fields[e.field] = raw
	}
	for _, c := range credentials {
		v := getenv(OwnEnvPrefix + c.suffix)
		if v == "" {
			continue
		}
		raw, _ := json.Marshal(v)
		if prev, ok := fields[c.field]; ok && !bytes.Equal(prev, raw) {
			errs = append(errs, fmt.Errorf("%s%s and %s%s are both set, to different values; unset one", OwnEnvPrefix, c.suffix, SoketiEnvPrefix, c.suffix))
			continue
		}
		fields[c.field] = raw
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	a, _, decodeErrs := decodeApp(fields)
	if len(decodeErrs) > 0 {
		return nil, errors.Join(decodeErrs...)
	}
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&a.ID, DefaultID)
	def(&a.Key, DefaultKey)
	def(&a.Secret, DefaultSecret)
	return New([]*App{a})
}

// checkCredentials applies the rule of the default app's credentials. With
// none of their variables set (HEADCOUNT_APP_ID, _KEY, _SECRET and soketi's
// SOKETI_DEFAULT_APP_ID, _KEY, _SECRET), the published defaults serve, for
// local use (`make run`). With any of them set, even to "", the key and
// the secret must both be set and not blank, and a set id not blank: a
// deployment that meant its own credentials but lost one (an empty
// template value, a missing Secret) would otherwise serve the published
// app-secret, with which anyone can sign its subscriptions and API calls.
// Each error names the variable; values are never printed.
func checkCredentials(lookup Lookup) []error {
	var set []string
	soketiOnly := true
	for _, c := range credentials {
		if _, ok := lookup(OwnEnvPrefix + c.suffix); ok {
			set, soketiOnly = append(set, OwnEnvPrefix+c.suffix), false
		}
		if _, ok := lookup(SoketiEnvPrefix + c.suffix); ok {
			set = append(set, SoketiEnvPrefix+c.suffix)
		}
	}
	if len(set) == 0 {
		return nil
	}
	why := fmt.Sprintf("with %s set, the app needs a key and a secret of its own (unset all of the app's id, key and secret variables to serve the published %s/%s, for local use only)",
		strings.Join(set, ", "), DefaultKey, DefaultSecret)
	var errs []error
	for _, c := range credentials {
		given := false
		for _, name := range []string{OwnEnvPrefix + c.suffix, SoketiEnvPrefix + c.suffix} {
			v, ok := lookup(name)
			if !ok {
				continue
			}
			given = true
			switch {
			case !utf8.ValidString(v):
				// JSON, which carries it to the app, would change it.
				errs = append(errs, fmt.Errorf("%s is not valid UTF-8", name))
			case strings.TrimSpace(v) != "":
			case c.field == "id":
				errs = append(errs, fmt.Errorf("%s is set but blank: give the app's id, or unset it for the default %s", name, DefaultID))
			default:
				errs = append(errs, fmt.Errorf("%s is set but blank: %s", name, why))
			}
		}
		if !given && c.field != "id" {
			name := OwnEnvPrefix + c.suffix
			if soketiOnly {
				name = SoketiEnvPrefix + c.suffix
			}
			errs = append(errs, fmt.Errorf("%s is not set: %s", name, why))
		}
	}
	return errs
}

// soketiConfigApps is where a soketi config file keeps its apps, as a
// dotted path: soketi sets each top-level key of the file at that path of
// its options, so the apps may be written nested or dotted.
const soketiConfigApps = "appManager.array.apps"

// soketiHints says, for soketi config keys by dotted prefix, what to use in
// headcount instead; the longest matching prefix wins. A key none matches
// is still named in a warning.
var soketiHints = map[string]string{
	"port":                            "wsnode's --addr (WebSocket, default :6001) and httpapi's --addr (HTTP API, default :8080)",
	"host":                            "wsnode's --addr and httpapi's --addr",
	"debug":                           "--log-level debug",
	"mode":                            "run wsnode for WebSockets and httpapi for the HTTP API and webhooks",
	"adapter":                         "--redis, --redis-cluster or --redis-sentinel: headcount always shares its state through Redis",
	"adapter.redis.prefix":            "--redis-prefix",
	"database.redis":                  "--redis (redis://host:port/db), --redis-username and --redis-password",
	"database.redis.keyprefix":        "--redis-prefix",
	"database.redis.sentinels":        "--redis-sentinel",
	"database.redis.sentinelpassword": "--redis-sentinel-password",
	"database.redis.name":             "--redis-sentinel-master",
	"database.redis.clusternodes":     "--redis-cluster",
	"cache":                           "nothing: cache channels keep their events in the Redis of --redis",
	"queue":                           "nothing: webhooks are queued in the Redis of --redis",
	"ratelimiter":                     "nothing: rate limits are kept in the Redis of --redis",
	"metrics":                         "--admin-addr, which always serves /metrics",
	"shutdowngraceperiod":             "wsnode's --drain",
	"userauthenticationtimeout":       "wsnode's --user-auth-timeout",
	"presence.maxmembersperchannel":   "the app field maxPresenceMembersPerChannel, in each app",
	"presence.maxmembersizeinkb":      "the app field maxPresenceMemberSizeInKb, in each app",
	"channellimits.maxnamelength":     "the app field maxChannelNameLength, in each app",
	"eventlimits.maxchannelsatonce":   "the app field maxEventChannelsAtOnce, in each app",
	"eventlimits.maxpayloadinkb":      "the app field maxEventPayloadInKb, in each app",
	"eventlimits.maxbatchsize":        "the app field maxEventBatchSize, in each app",
	"eventlimits.maxnamelength":       "nothing: event names are limited to 200 bytes",
	"ssl":                             "TLS in front of wsnode and httpapi (a load balancer or the Kubernetes ingress component)",
	"cors":                            "the app field allowedOrigins for WebSocket origins",
	"webhooks.batching":               "the batch field of each webhook",
	"appmanager":                      "nothing: apps come from appManager.array.apps only",
}

func soketiHint(path string) string {
	c := strings.ToLower(path)
	best, hint := -1, ""
	for prefix, h := range soketiHints {
		if (c == prefix || strings.HasPrefix(c, prefix+".")) && len(prefix) > best {
			best, hint = len(prefix), h
		}
	}
	return hint
}

// parseSoketiConfig reads the apps of a soketi config file (its
// appManager.array.apps) and names each other setting in a warning, with
// headcount's equivalent where there is one: they configure soketi's
// server, which headcount's flags do.
func parseSoketiConfig(b []byte) (apps []map[string]json.RawMessage, warnings []string, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, nil, fmt.Errorf("soketi config: %w", err)
	}
	leaves := map[string]json.RawMessage{}
	flatten("", top, leaves)
	var appsRaw json.RawMessage
	var errs []error
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range leaves {
			if !yield(p) {
				return
			}
		}
	}) {
		v := leaves[path]
		switch {
		case strings.EqualFold(path, soketiConfigApps):
			appsRaw = v
		case strings.EqualFold(path, "appManager.driver"):
			var d string
			if json.Unmarshal(v, &d) != nil || d != "array" {
				errs = append(errs, fmt.Errorf("soketi config: appManager.driver is %s: a config file gives headcount only the array driver's apps (appManager.array.apps); for apps in PostgreSQL or MySQL, give --apps-db postgres://... or mysql://... (or soketi's SOKETI_APP_MANAGER_DRIVER and SOKETI_DB_* variables) instead of the file", v))
			}
		default:
			w := fmt.Sprintf("soketi config key %s is not read", path)
			if h := soketiHint(path); h != "" {
				w += "; use " + h
			}
			warnings = append(warnings, w)
		}
	}
	if appsRaw == nil {
		errs = append(errs, errors.New("soketi config: no apps in appManager.array.apps"))
	} else if err := json.Unmarshal(appsRaw, &apps); err != nil {
		errs = append(errs, fmt.Errorf("soketi config: appManager.array.apps must be an array of objects: %w", err))
	}
	return apps, warnings, errors.Join(errs...)
}

// flatten records obj's values by dotted path, descending into objects
// (soketi's keys may be nested or dotted) but stopping at the apps, whose
// objects are data.
func flatten(prefix string, obj map[string]json.RawMessage, out map[string]json.RawMessage) {
	for k, v := range obj {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		var nested map[string]json.RawMessage
		if !strings.EqualFold(path, soketiConfigApps) && json.Unmarshal(v, &nested) == nil && len(nested) > 0 {
			flatten(path, nested, out)
			continue
		}
		out[path] = v
	}
}
