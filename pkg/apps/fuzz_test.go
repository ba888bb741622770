package apps

import (
	"slices"
	"strings"
	"testing"

	"github.com/headcount/headcount/pkg/eventlog"
)

// FuzzParse: no apps file makes Parse panic, and an app it accepts has its
// origins checkable, a key pusher-js can put in its URL, a secret that is
// not blank, webhooks asking for known event types only, and capacities
// for presence channels within MaxCapacity.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`[{"id":"a","key":"k","secret":"s","allowed_origins":["*.example.com","https://a.b"],"webhooks":[{"url":"u","lambda":{}}]}]`))
	f.Add([]byte(`[{"AppId":1,"key":"k","secret":"s","max_read_req_per_sec":3,"capacities":[{"Prefix":"presence-p","capacity":2}]}]`))
	f.Add([]byte(`[{"id":"a","key":"k","secret":"s","maxChannelsPerConnection":1000,"max_channels":-1}]`))
	f.Add([]byte(`{"port":6001,"appManager":{"driver":"array","array":{"apps":[{"id":1,"key":"k","secret":"s"}]}},"database.redis.host":"r"}`))
	// Each refused for one field.
	f.Add([]byte(`[{"id":"a","key":"k","secret":"s","webhooks":[{"url":"http://u","event_types":["channel_ocupied"]}]}]`))
	f.Add([]byte(`[{"id":"a","key":"k","secret":"s","capacities":[{"prefix":"private-","capacity":2},{"prefix":"presence-a b","capacity":2}]}]`))
	f.Add([]byte(`[{"id":"a","key":"k","secret":"s","capacities":[{"prefix":"presence-","capacity":1000000001}]}]`))
	f.Add([]byte(`[{"id":"a","key":"k/1","secret":"s"},{"id":"b","key":"..","secret":"s"},{"id":"c","key":"k:2","secret":"s"}]`))
	f.Add([]byte(`[{"id":"a","key":"k","secret":" \t\n"}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		for _, a := range r.All() {
			_ = a.AllowsOrigin("https://x.example.com")
			if checkKey(a.Key) != nil || strings.ContainsAny(a.Key, "/?#%: ") || strings.TrimSpace(a.Secret) == "" {
				t.Fatalf("accepted key %q, secret %q", a.Key, a.Secret)
			}
			for _, w := range a.Webhooks {
				for _, typ := range w.EventTypes {
					if !slices.Contains(eventlog.Names, typ) {
						t.Fatalf("accepted event type %q", typ)
					}
				}
			}
			for _, c := range a.Capacities {
				if !strings.HasPrefix(c.Prefix, "presence-") || c.Capacity < 1 || c.Capacity > MaxCapacity {
					t.Fatalf("accepted capacity %+v", c)
				}
			}
		}
	})
}

// FuzzAllowsOrigin: matching never panics, and "*" allows everything.
func FuzzAllowsOrigin(f *testing.F) {
	f.Add("*.example.com", "https://a.example.com")
	f.Add("https://a.example.com", "null")
	f.Fuzz(func(t *testing.T, entry, origin string) {
		_ = (&App{AllowedOrigins: []string{entry}}).AllowsOrigin(origin)
		if !(&App{AllowedOrigins: []string{entry, "*"}}).AllowsOrigin(origin) {
			t.Fatalf("* refused %q", origin)
		}
	})
}

// FuzzFromEnv: no value of soketi's or headcount's app variables makes
// FromEnv panic; an app it accepts has all three credentials, and the
// published secret only when no credential variable is set ("" unsets a
// variable here, "-" sets it to the empty string).
func FuzzFromEnv(f *testing.F) {
	f.Add("foo", "true", "250", `[{"url":"https://example.com/h","event_types":["channel_vacated"]}]`, "bar", "k", "s")
	f.Add("1", "yes", "-1", `{"url":1}`, "", "", "")
	f.Add("", "", "", "", "", "k", "-")
	f.Fuzz(func(t *testing.T, id, flag, number, webhooks, own, key, secret string) {
		env := map[string]string{}
		for name, v := range map[string]string{
			"SOKETI_DEFAULT_APP_ID": id, "SOKETI_DEFAULT_APP_ENABLE_CLIENT_MESSAGES": flag,
			"SOKETI_DEFAULT_APP_MAX_CONNS": number, "SOKETI_DEFAULT_APP_WEBHOOKS": webhooks,
			"HEADCOUNT_APP_ID": own, "HEADCOUNT_APP_KEY": key, "SOKETI_DEFAULT_APP_SECRET": secret,
		} {
			switch v {
			case "":
			case "-":
				env[name] = ""
			default:
				env[name] = v
			}
		}
		r, err := FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			return
		}
		a := r.All()[0]
		if a.ID == "" || a.Key == "" || a.Secret == "" {
			t.Fatalf("app without credentials: %+v", a)
		}
		_, ownID := env["HEADCOUNT_APP_ID"]
		_, soketiID := env["SOKETI_DEFAULT_APP_ID"]
		_, ownKey := env["HEADCOUNT_APP_KEY"]
		if (ownID || soketiID || ownKey) && a.Secret != env["SOKETI_DEFAULT_APP_SECRET"] {
			t.Fatalf("credential variables set, yet secret %q served", a.Secret)
		}
	})
}
