package apps

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSoketiArray(t *testing.T) {
	r, err := Parse([]byte(`[
	  {"id": "app-id", "key": "app-key", "secret": "app-secret", "enableClientMessages": true,
	   "max_connections": 100, "maxBackendEventsPerSecond": -1,
	   "webhooks": [{"url": "http://127.0.0.1:9/h", "event_types": ["channel_occupied"]}]},
	  {"id": 42, "key": "k2", "secret": "s2", "enabled": false, "maxWebhookLogSizeInMb": 0.5,
	   "capacities": [{"prefix": "presence-room-", "capacity": 30}]}
	]`))
	require.NoError(t, err)
	a := r.ByKey("app-key")
	require.NotNil(t, a)
	require.True(t, a.Enabled)
	require.True(t, a.EnableClientMessages)
	require.Equal(t, 100, a.MaxConnections)
	require.Equal(t, "http://127.0.0.1:9/h", a.Webhooks[0].URL)
	b := r.ByID("42")
	require.NotNil(t, b)
	require.False(t, b.Enabled)
	require.Equal(t, 30, b.Capacities[0].Capacity)
	require.Equal(t, 0.5, b.MaxWebhookLogSizeInMb)
	require.Zero(t, a.MaxWebhookLogSizeInMb)
}

func TestParseRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not an array":  `{"id":"a"}`,
		"empty":         `[]`,
		"missing key":   `[{"id":"a","secret":"s"}]`,
		"bad id":        `[{"id":"{a}","key":"k","secret":"s"}]`,
		"duplicate id":  `[{"id":"a","key":"k","secret":"s"},{"id":"a","key":"k2","secret":"s"}]`,
		"duplicate key": `[{"id":"a","key":"k","secret":"s"},{"id":"b","key":"k","secret":"s"}]`,
		"wrong type":    `[{"id":"a","key":"k","secret":"s","maxConnections":"many"}]`,
		"negative log":  `[{"id":"a","key":"k","secret":"s","maxWebhookLogSizeInMb":-1}]`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(in))
			require.Error(t, err)
		})
	}
}

func TestFromEnvDefaults(t *testing.T) {
	r, err := FromEnv(envOf(nil))
	require.NoError(t, err)
	a := r.ByKey(DefaultKey)
	require.Equal(t, DefaultID, a.ID)
	require.Equal(t, DefaultSecret, a.Secret)

	r, err = FromEnv(envOf(map[string]string{"HEADCOUNT_APP_ID": "7", "HEADCOUNT_APP_KEY": "k7", "HEADCOUNT_APP_SECRET": "s7"}))
	require.NoError(t, err)
	require.Equal(t, "s7", r.ByID("7").Secret)

	r, err = FromEnv(envOf(map[string]string{"HEADCOUNT_APP_KEY": "k7", "HEADCOUNT_APP_SECRET": "s7"}))
	require.NoError(t, err)
	require.NotNil(t, r.ByKey("k7"), "the id alone may keep its default")
	require.Equal(t, DefaultID, r.ByKey("k7").ID)
}

// TestFromEnvCredentials: once any of the default app's credential
// variables is set, even to "", the key and the secret must both be set
// and not blank, so that a lost one never serves the published secret;
// each error names the variable, never its value.
func TestFromEnvCredentials(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		want []string
	}{
		"key only":              {map[string]string{"HEADCOUNT_APP_KEY": "k"}, []string{"HEADCOUNT_APP_SECRET is not set"}},
		"id only":               {map[string]string{"HEADCOUNT_APP_ID": "prod"}, []string{"HEADCOUNT_APP_KEY is not set", "HEADCOUNT_APP_SECRET is not set"}},
		"secret only":           {map[string]string{"HEADCOUNT_APP_SECRET": "s3cret"}, []string{"HEADCOUNT_APP_KEY is not set"}},
		"empty secret":          {map[string]string{"HEADCOUNT_APP_ID": "prod", "HEADCOUNT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": ""}, []string{"HEADCOUNT_APP_SECRET is set but blank"}},
		"blank secret":          {map[string]string{"HEADCOUNT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": " \t"}, []string{"HEADCOUNT_APP_SECRET is set but blank"}},
		"all empty":             {map[string]string{"HEADCOUNT_APP_ID": "", "HEADCOUNT_APP_KEY": "", "HEADCOUNT_APP_SECRET": ""}, []string{"HEADCOUNT_APP_ID is set but blank", "HEADCOUNT_APP_KEY is set but blank", "HEADCOUNT_APP_SECRET is set but blank"}},
		"empty secret alone":    {map[string]string{"HEADCOUNT_APP_SECRET": ""}, []string{"HEADCOUNT_APP_SECRET is set but blank", "HEADCOUNT_APP_KEY is not set"}},
		"soketi key only":       {map[string]string{"SOKETI_DEFAULT_APP_KEY": "k"}, []string{"SOKETI_DEFAULT_APP_SECRET is not set"}},
		"soketi id only":        {map[string]string{"SOKETI_DEFAULT_APP_ID": "42", "SOKETI_DEFAULT_APP_ENABLED": "false"}, []string{"SOKETI_DEFAULT_APP_KEY is not set", "SOKETI_DEFAULT_APP_SECRET is not set"}},
		"soketi empty secret":   {map[string]string{"SOKETI_DEFAULT_APP_KEY": "k", "SOKETI_DEFAULT_APP_SECRET": ""}, []string{"SOKETI_DEFAULT_APP_SECRET is set but blank"}},
		"secret not UTF-8":      {map[string]string{"HEADCOUNT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": "s\xad"}, []string{"HEADCOUNT_APP_SECRET is not valid UTF-8"}},
		"mixed, secret missing": {map[string]string{"SOKETI_DEFAULT_APP_KEY": "k", "HEADCOUNT_APP_ID": "a"}, []string{"HEADCOUNT_APP_SECRET is not set"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromEnv(envOf(tc.env))
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			require.Equal(t, len(tc.want), len(strings.Split(err.Error(), "\n")), err.Error())
			require.NotContains(t, err.Error(), "s3cret")
		})
	}

	// Given under either name, or both alike, they serve.
	for _, env := range []map[string]string{
		{"HEADCOUNT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": "s"},
		{"SOKETI_DEFAULT_APP_KEY": "k", "SOKETI_DEFAULT_APP_SECRET": "s"},
		{"HEADCOUNT_APP_KEY": "k", "SOKETI_DEFAULT_APP_SECRET": "s", "SOKETI_DEFAULT_APP_ID": "a"},
		{"HEADCOUNT_APP_SECRET": "s", "SOKETI_DEFAULT_APP_SECRET": "s", "SOKETI_DEFAULT_APP_KEY": "k"},
	} {
		r, err := FromEnv(envOf(env))
		require.NoError(t, err, "%v", env)
		require.Equal(t, "s", r.ByKey("k").Secret)
	}
}

func TestAdmissionValidation(t *testing.T) {
	_, err := Parse([]byte(`[{"id":"a","key":"k","secret":"s","capacities":[{"prefix":"presence-room-","capacity":0}],"admission":{"graceSeconds":-1}}]`))
	require.ErrorContains(t, err, `app "a": capacities[0] (prefix "presence-room-"): capacity must be 1 to 1000000000 (MaxCapacity), not 0`)
	require.ErrorContains(t, err, "admission.graceSeconds must not be negative")

	// Above the maximum a capacity would not read back exact from Redis.
	_, err = Parse([]byte(`[{"id":"a","key":"k","secret":"s","capacities":[{"prefix":"presence-a-","capacity":1000000000},{"prefix":"presence-b-","capacity":9223372036854775807}]}]`))
	require.ErrorContains(t, err, `app "a": capacities[1] (prefix "presence-b-"): capacity must be 1 to 1000000000 (MaxCapacity), not 9223372036854775807`)
	require.NotContains(t, err.Error(), "capacities[0]")
}

func TestParseLimits(t *testing.T) {
	r, err := Parse([]byte(`[
	  {"id": "a", "key": "ka", "secret": "s", "maxClientEventsPerSecond": 3, "max_backend_events_per_sec": 5,
	   "MaxReadRequestsPerSecond": 7, "max_channel_name_length": 300,
	   "allowed_origins": ["https://app.example.com", "*.example.org"]},
	  {"AppId": "b", "AppKey": "kb", "AppSecret": "s", "maxClientEventsPerSecond": -1, "maxBackendEventsPerSecond": -1}
	]`))
	require.NoError(t, err)
	require.Empty(t, r.Warnings())
	a := r.ByID("a")
	require.Equal(t, 3, a.ClientEventsPerSecond())
	require.Equal(t, 5, a.MaxBackendEventsPerSecond)
	require.Equal(t, 7, a.MaxReadRequestsPerSecond)
	require.Equal(t, 300, a.ChannelNameLimit())
	require.Equal(t, []string{"https://app.example.com", "*.example.org"}, a.AllowedOrigins)
	b := r.ByKey("kb")
	require.NotNil(t, b)
	require.Zero(t, b.ClientEventsPerSecond(), "-1 is unlimited, as in soketi")
	require.Equal(t, 200, b.ChannelNameLimit())
	require.Nil(t, b.AllowedOrigins)

	def, err := FromEnv(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, DefaultClientEventsPerSecond, def.All()[0].ClientEventsPerSecond())
}

// TestParseUnknownFields: soketi's settings headcount does not implement
// load with a warning naming each; any other field is refused, named with
// its app; nested objects are checked the same way.
func TestParseUnknownFields(t *testing.T) {
	r, err := Parse([]byte(`[{"id": "a", "key": "k", "secret": "s", "max_event_name_length": 100,
	  "webhooks": [{"url": "http://127.0.0.1:9/h", "eventTypes": ["channel_occupied"]}]}]`))
	require.NoError(t, err)
	require.Equal(t, []string{"channel_occupied"}, r.ByID("a").Webhooks[0].EventTypes, "nested names match like top-level ones")
	require.Equal(t, []string{`app "a": field maxEventNameLength is a soketi setting headcount does not implement; it is ignored`}, r.Warnings())

	for name, tc := range map[string]struct{ in, want string }{
		"typo":          {`[{"id":"a","key":"k","secret":"s","maxConections":5}]`, `app 0 (id "a"): unknown field(s) "maxConections"`},
		"nested typo":   {`[{"id":"a","key":"k","secret":"s","capacities":[{"prefix":"p","capacity":1,"capactiy":2}]}]`, `capacities[0].capactiy: unknown`},
		"twice":         {`[{"id":"a","key":"k","secret":"s","maxConnections":5,"max_connections":6}]`, `given twice`},
		"bad origin":    {`[{"id":"a","key":"k","secret":"s","allowedOrigins":["https://a.example.com/path"]}]`, `allowedOrigins[0]`},
		"bad host":      {`[{"id":"a","key":"k","secret":"s","allowedOrigins":["a example"]}]`, `allowedOrigins[0]`},
		"negative name": {`[{"id":"a","key":"k","secret":"s","maxChannelNameLength":-1}]`, `maxChannelNameLength must not be negative`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestAllowsOrigin(t *testing.T) {
	a := &App{AllowedOrigins: []string{"https://App.example.com", "*.example.org", "localhost", "http://x.test:80/"}}
	for origin, want := range map[string]bool{
		"":                             true, // no Origin: not a browser
		"https://app.example.com":      true,
		"HTTPS://APP.EXAMPLE.COM":      true,
		"http://app.example.com":       false, // another scheme
		"https://app.example.com:8443": false,
		"https://evil.com":             false,
		"https://a.example.org":        true,
		"http://a.b.example.org:81":    true,
		"https://example.org":          false,
		"https://example.org.evil.com": false,
		"http://localhost:3000":        true,
		"null":                         false,
		"https://app.example.com:443":  true, // the default port
		"http://x.test":                true,
		"http://x.test:8080":           false,
		"not a url":                    false,
		// As browsers send it (RFC 6454) or refused: no user, path, query,
		// fragment, second origin; host patterns only for http and https.
		"https://evil.com:443@x.example.org":       false,
		"https://user@app.example.com":             false,
		"https://app.example.com/path":             false,
		"https://app.example.com?q":                false,
		"https://app.example.com#f":                false,
		"https://app.example.com https://evil.com": false,
		"https://evil.com https://app.example.com": false,
		"ftp://a.example.org":                      false,
		"javascript://a.example.org":               false,
		"chrome-extension://a.example.org":         false,
		"https://a.example.org\\@evil.com":         false,
		"http://localhost:3000/":                   true, // a trailing slash, as before
	} {
		require.Equal(t, want, a.AllowsOrigin(origin), origin)
	}
	require.True(t, (&App{}).AllowsOrigin("https://evil.com"), "no list allows all")
	require.True(t, (&App{AllowedOrigins: []string{"*"}}).AllowsOrigin("null"))
	require.False(t, (&App{AllowedOrigins: []string{}}).AllowsOrigin("https://a.com"), "an empty list allows no browser")
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*.a.com", "x.a.com", true}, {"*.a.com", "a.com", false}, {"*", "", true},
		{"a*b*c", "aXbYc", true}, {"a*b*c", "aXbY", false}, {"**", "x", true},
		{"*a*a*a*a*b", strings.Repeat("a", 200), false},
	} {
		require.Equal(t, tc.want, glob(tc.p, tc.s), "%s %s", tc.p, tc.s)
	}
}

// TestValidateAcceptsNothingSilently: what would load and then never
// work (a webhook event type no event has, a capacity no channel it could
// gate, a key pusher-js cannot put in its URL, a blank secret) is an error
// naming the app and the field, whichever source the app came from.
func TestValidateAcceptsNothingSilently(t *testing.T) {
	const ok = `"id":"a","key":"k","secret":"s"`
	for name, tc := range map[string]struct{ in, want string }{
		"event type typo": {`[{` + ok + `,"webhooks":[{"url":"http://u","event_types":["channel_occupied","channel_ocupied"]}]}]`,
			`app "a": webhooks[0]: event_types[1] "channel_ocupied" is not an event type (known: channel_occupied, channel_vacated, member_added, member_removed, client_event, subscription_count, cache_miss, admission_admitted, admission_dropped, events_dropped)`},
		"private prefix": {`[{` + ok + `,"capacities":[{"prefix":"private-room-","capacity":3}]}]`,
			`app "a": capacities[0] (prefix "private-room-"): not a presence channel's prefix: capacities apply to presence channels only, so start it with presence-`},
		"empty prefix":    {`[{` + ok + `,"capacities":[{"prefix":"","capacity":3}]}]`, `capacities[0] (prefix ""): not a presence channel's prefix`},
		"short prefix":    {`[{` + ok + `,"capacities":[{"prefix":"presence","capacity":3}]}]`, `capacities[0] (prefix "presence"): not a presence channel's prefix`},
		"bad prefix":      {`[{` + ok + `,"capacities":[{"prefix":"presence-room 1","capacity":3}]}]`, `capacities[0] (prefix "presence-room 1"): no channel name starts so`},
		"same prefix":     {`[{` + ok + `,"capacities":[{"prefix":"presence-a","capacity":3},{"prefix":"presence-a","capacity":4}]}]`, `capacities[1] (prefix "presence-a"): the same prefix as capacities[0]`},
		"key with slash":  {`[{"id":"a","key":"k/1","secret":"s"}]`, `app "a": key "k/1" must be 1-128 characters of A-Z a-z 0-9 - . _ ~`},
		"key with query":  {`[{"id":"a","key":"k?x","secret":"s"}]`, `app "a": key "k?x" must be`},
		"key with space":  {`[{"id":"a","key":"k 1","secret":"s"}]`, `app "a": key "k 1" must be`},
		"key with colon":  {`[{"id":"a","key":"k:1","secret":"s"}]`, `app "a": key "k:1" must be`},
		"key with escape": {`[{"id":"a","key":"k%2F","secret":"s"}]`, `app "a": key "k%2F" must be`},
		"key too long":    {`[{"id":"a","key":"` + strings.Repeat("k", 129) + `","secret":"s"}]`, `must be 1-128 characters`},
		"dot key":         {`[{"id":"a","key":"..","secret":"s"}]`, `app "a": key ".." is a dot segment`},
		"blank secret":    {`[{"id":"a","key":"k","secret":" \t"}]`, `app "a": secret is empty or blank`},
		"soketi config":   {`{"appManager.array.apps":[{` + ok + `,"webhooks":[{"url":"http://u","event_types":["member_add"]}]}]}`, `event_types[0] "member_add" is not an event type`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			require.ErrorContains(t, err, tc.want)
		})
	}

	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"env event type": {map[string]string{"SOKETI_DEFAULT_APP_KEY": "k", "SOKETI_DEFAULT_APP_SECRET": "s",
			"SOKETI_DEFAULT_APP_WEBHOOKS": `[{"url":"http://u","event_types":["channel_ocupied"]}]`}, `webhooks[0]: event_types[0] "channel_ocupied" is not an event type`},
		"env key": {map[string]string{"HEADCOUNT_APP_KEY": "a/b", "HEADCOUNT_APP_SECRET": "s"}, `app "app-id": key "a/b" must be`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromEnv(envOf(tc.env))
			require.ErrorContains(t, err, tc.want)
		})
	}

	// Keys as Pusher, soketi and Reverb make them, and the docs and tests use, load.
	for _, key := range []string{"278d425bdf160c739803", "app-key", "my-key", "key-1", "a.b_c~d", "0"} {
		_, err := New([]*App{{ID: "a", Key: key, Secret: "s"}})
		require.NoError(t, err, key)
	}
	for _, p := range []string{"presence-", "presence-room-", "presence-cache-"} {
		_, err := New([]*App{{ID: "a", Key: "k", Secret: "s", Capacities: []Capacity{{Prefix: p, Capacity: 1}}}})
		require.NoError(t, err, p)
	}
}

func TestParseChannelCaps(t *testing.T) {
	r, err := Parse([]byte(`[
	  {"id": "a", "key": "ka", "secret": "s", "maxChannelsPerConnection": 50, "max_channels": 10},
	  {"id": "b", "key": "kb", "secret": "s", "maxChannels": -1},
	  {"id": "c", "key": "kc", "secret": "s"}
	]`))
	require.NoError(t, err)
	require.Empty(t, r.Warnings())
	a, b, c := r.ByID("a"), r.ByID("b"), r.ByID("c")
	require.Equal(t, 50, a.ChannelsPerConnection())
	require.Equal(t, 10, a.ChannelLimit())
	require.Equal(t, 0, b.ChannelLimit(), "negative: no limit")
	require.Equal(t, DefaultMaxChannelsPerConnection, c.ChannelsPerConnection())
	require.Equal(t, DefaultMaxChannels, c.ChannelLimit())

	for _, bad := range []string{`-1`, `10001`, `"many"`} {
		_, err := Parse([]byte(`[{"id":"a","key":"k","secret":"s","maxChannelsPerConnection":` + bad + `}]`))
		require.ErrorContains(t, err, "maxChannelsPerConnection", bad)
	}
}
