package apps

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func envOf(m map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestFromEnvSoketiNames: soketi's default-app variables make the app, as
// they did under soketi, with its switches and limits.
func TestFromEnvSoketiNames(t *testing.T) {
	r, err := FromEnv(envOf(map[string]string{
		"SOKETI_DEFAULT_APP_ID":                         "foo",
		"SOKETI_DEFAULT_APP_KEY":                        "foo-key",
		"SOKETI_DEFAULT_APP_SECRET":                     "true", // a credential stays a string
		"SOKETI_DEFAULT_APP_ENABLE_CLIENT_MESSAGES":     "true",
		"SOKETI_DEFAULT_APP_USER_AUTHENTICATION":        "true",
		"SOKETI_DEFAULT_APP_MAX_CONNS":                  "250",
		"SOKETI_DEFAULT_APP_MAX_BACKEND_EVENTS_PER_SEC": "7",
		"SOKETI_DEFAULT_APP_MAX_CLIENT_EVENTS_PER_SEC":  "-1",
		"SOKETI_DEFAULT_APP_MAX_READ_REQ_PER_SEC":       "9",
		"SOKETI_DEFAULT_APP_WEBHOOKS":                   `[{"url":"https://example.com/hook","event_types":["channel_vacated"]}]`,
	}))
	require.NoError(t, err)
	a := r.ByID("foo")
	require.NotNil(t, a, "soketi's SOKETI_DEFAULT_APP_ID names the app")
	require.Equal(t, a, r.ByKey("foo-key"))
	require.Equal(t, "true", a.Secret)
	require.True(t, a.Enabled)
	require.True(t, a.EnableClientMessages)
	require.True(t, a.EnableUserAuthentication)
	require.Equal(t, 250, a.MaxConnections)
	require.Equal(t, 7, a.MaxBackendEventsPerSecond)
	require.Zero(t, a.ClientEventsPerSecond())
	require.Equal(t, 9, a.MaxReadRequestsPerSecond)
	require.Equal(t, "https://example.com/hook", a.Webhooks[0].URL)

	r, err = FromEnv(envOf(map[string]string{"SOKETI_DEFAULT_APP_ENABLED": "false", "SOKETI_DEFAULT_APP_KEY": "k", "SOKETI_DEFAULT_APP_SECRET": "s"}))
	require.NoError(t, err)
	require.False(t, r.ByKey("k").Enabled)
	require.Equal(t, DefaultID, r.ByKey("k").ID, "an unset id keeps soketi's default")

	r, err = FromEnv(envOf(map[string]string{"SOKETI_DEFAULT_APP_MAX_CONNS": "5"}))
	require.NoError(t, err)
	require.Equal(t, 5, r.ByKey(DefaultKey).MaxConnections, "without credential variables, the defaults serve")
}

// TestFromEnvPrecedence: headcount's and soketi's names combine; the same
// credential set twice to different values is refused, naming both.
func TestFromEnvPrecedence(t *testing.T) {
	r, err := FromEnv(envOf(map[string]string{"HEADCOUNT_APP_ID": "a", "SOKETI_DEFAULT_APP_ID": "a", "SOKETI_DEFAULT_APP_KEY": "k", "HEADCOUNT_APP_SECRET": "s"}))
	require.NoError(t, err)
	require.Equal(t, "k", r.ByID("a").Key)

	_, err = FromEnv(envOf(map[string]string{"HEADCOUNT_APP_SECRET": "s1", "SOKETI_DEFAULT_APP_SECRET": "s2", "HEADCOUNT_APP_ID": "x", "SOKETI_DEFAULT_APP_ID": "y", "HEADCOUNT_APP_KEY": "k"}))
	require.ErrorContains(t, err, "HEADCOUNT_APP_SECRET and SOKETI_DEFAULT_APP_SECRET are both set, to different values")
	require.ErrorContains(t, err, "HEADCOUNT_APP_ID and SOKETI_DEFAULT_APP_ID")
	require.NotContains(t, err.Error(), "s1", "secrets are not printed")

	_, err = FromEnv(envOf(map[string]string{"SOKETI_DEFAULT_APP_MAX_CONNS": "many", "SOKETI_DEFAULT_APP_ENABLE_CLIENT_MESSAGES": "yes"}))
	require.ErrorContains(t, err, "SOKETI_DEFAULT_APP_MAX_CONNS: field maxConnections")
	require.ErrorContains(t, err, "SOKETI_DEFAULT_APP_ENABLE_CLIENT_MESSAGES: field enableClientMessages")

	require.Equal(t, []string{"SOKETI_DEFAULT_APP_ID", "SOKETI_DEFAULT_APP_MAX_CONNS"},
		EnvSet(envOf(map[string]string{"SOKETI_DEFAULT_APP_MAX_CONNS": "1", "SOKETI_DEFAULT_APP_ID": "a", "SOKETI_DEBUG": "1"})))
}

// TestParseSoketiConfig: a soketi config file given as the apps file
// serves its appManager.array.apps, soketi spellings and all, and names
// every other setting once, with headcount's equivalent.
func TestParseSoketiConfig(t *testing.T) {
	r, err := NewFile("testdata/soketi-config.json").Load(context.Background())
	require.NoError(t, err)
	a := r.ByID("123456")
	require.NotNil(t, a)
	require.Equal(t, "echo-key", a.Key)
	require.True(t, a.EnableClientMessages)
	require.Equal(t, 1000, a.MaxConnections)
	require.Equal(t, []string{"channel_occupied", "member_added"}, a.Webhooks[0].EventTypes)
	b := r.ByKey("second-key")
	require.NotNil(t, b)
	require.False(t, b.Enabled)
	require.Equal(t, []string{
		"soketi config key adapter.driver is not read; use --redis, --redis-cluster or --redis-sentinel: headcount always shares its state through Redis",
		"soketi config key database.redis.host is not read; use --redis (redis://host:port/db), --redis-username and --redis-password",
		"soketi config key database.redis.port is not read; use --redis (redis://host:port/db), --redis-username and --redis-password",
		"soketi config key debug is not read; use --log-level debug",
		"soketi config key metrics.enabled is not read; use --admin-addr, which always serves /metrics",
		"soketi config key metrics.port is not read; use --admin-addr, which always serves /metrics",
		"soketi config key port is not read; use wsnode's --addr (WebSocket, default :6001) and httpapi's --addr (HTTP API, default :8080)",
		"soketi config key presence.maxMembersPerChannel is not read; use the app field maxPresenceMembersPerChannel, in each app",
		`app "123456": field maxEventNameLength is a soketi setting headcount does not implement; it is ignored`,
	}, r.Warnings())

	// Nested, as soketi also reads it; an unknown key is still named.
	r, err = Parse([]byte(` {"appManager": {"array": {"apps": [{"id": "a", "key": "k", "secret": "s"}]}}, "cluster": {"port": 11002}}`))
	require.NoError(t, err)
	require.NotNil(t, r.ByID("a"))
	require.Equal(t, []string{"soketi config key cluster.port is not read"}, r.Warnings())

	for name, tc := range map[string]struct{ in, want string }{
		"no apps":     {`{"port": 6001}`, "no apps in appManager.array.apps"},
		"mysql":       {`{"appManager.driver": "mysql", "appManager.array.apps": [{"id":"a","key":"k","secret":"s"}]}`, `appManager.driver is "mysql": a config file gives headcount only the array driver's apps (appManager.array.apps); for apps in PostgreSQL or MySQL, give --apps-db`},
		"apps object": {`{"appManager.array.apps": {"id": "a"}}`, "appManager.array.apps must be an array of objects"},
		"app typo":    {`{"appManager.array.apps": [{"id":"a","key":"k","secret":"s","maxConections":1}]}`, `unknown field(s) "maxConections"`},
		"broken json": {`{"appManager.array.apps": [`, "soketi config"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.True(t, strings.HasPrefix(soketiHint("database.redis.clusterNodes"), "--redis-cluster"))
}

// TestParseReverbApp: an app written from Reverb's config keeps the names
// the migration guide says it keeps.
func TestParseReverbApp(t *testing.T) {
	r, err := Parse([]byte(`[{"app_id": "123456", "key": "my-key", "secret": "my-secret",
	  "allowed_origins": ["app.example.com"], "max_connections": 100}]`))
	require.NoError(t, err)
	a := r.ByID("123456")
	require.NotNil(t, a)
	require.Equal(t, []string{"app.example.com"}, a.AllowedOrigins)
	require.Equal(t, 100, a.MaxConnections)
	_, err = Parse([]byte(`[{"app_id": "1", "key": "k", "secret": "s", "ping_interval": 60}]`))
	require.ErrorContains(t, err, `"ping_interval"`, "the guide says to leave it out")
}
