package apps

import (
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
	r, err := FromEnv(func(string) string { return "" })
	require.NoError(t, err)
	a := r.ByKey(DefaultKey)
	require.Equal(t, DefaultID, a.ID)
	require.Equal(t, DefaultSecret, a.Secret)

	r, err = FromEnv(func(k string) string { return map[string]string{"HEADCOUNT_APP_ID": "7"}[k] })
	require.NoError(t, err)
	require.NotNil(t, r.ByID("7"))
}

func TestAdmissionValidation(t *testing.T) {
	_, err := Parse([]byte(`[{"id":"a","key":"k","secret":"s","capacities":[{"prefix":"presence-room-","capacity":0}],"admission":{"graceSeconds":-1}}]`))
	require.ErrorContains(t, err, "capacity must be at least 1, not 0")
	require.ErrorContains(t, err, "admission.graceSeconds must not be negative")
}
