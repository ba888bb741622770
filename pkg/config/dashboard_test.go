package config

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHTTPAPIDashboardSettings: --dashboard is off unless asked for, by flag
// or HEADCOUNT_DASHBOARD; --demo-ws defaults to wsnode A of `make run`.
func TestHTTPAPIDashboardSettings(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.False(t, c.Dashboard, "off by default: the dashboard answers without a signature")
	require.Equal(t, "127.0.0.1:6001", c.DemoWS)

	c, err = ParseHTTPAPI(nil, env(map[string]string{"HEADCOUNT_DASHBOARD": "true", "HEADCOUNT_DEMO_WS": ":7001"}), io.Discard)
	require.NoError(t, err)
	require.True(t, c.Dashboard)
	require.Equal(t, ":7001", c.DemoWS)

	c, err = ParseHTTPAPI([]string{"--dashboard=false"}, env(map[string]string{"HEADCOUNT_DASHBOARD": "1"}), io.Discard)
	require.NoError(t, err)
	require.False(t, c.Dashboard, "flags win over env")

	c, err = ParseHTTPAPI([]string{"--dashboard"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.True(t, c.Dashboard)

	_, err = ParseHTTPAPI(nil, env(map[string]string{"HEADCOUNT_DASHBOARD": "maybe"}), io.Discard)
	require.ErrorContains(t, err, "HEADCOUNT_DASHBOARD")
	_, err = ParseHTTPAPI([]string{"--demo-ws", "nowhere"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--demo-ws")
}

// TestDashboardHosts: --dashboard-hosts is a comma-separated list of host
// names, empty by default; anything else than names is refused by name.
func TestDashboardHosts(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Empty(t, c.DashboardHostList())

	c, err = ParseHTTPAPI(nil, env(map[string]string{"HEADCOUNT_DASHBOARD_HOSTS": " Dash.Example.com, ops.internal ,,"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"dash.example.com", "ops.internal"}, c.DashboardHostList())

	c, err = ParseHTTPAPI([]string{"--dashboard-hosts", "a.example"}, env(map[string]string{"HEADCOUNT_DASHBOARD_HOSTS": "b.example"}), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"a.example"}, c.DashboardHostList(), "flags win over env")

	for _, bad := range []string{"dash.example.com:8080", "https://dash.example.com", "dash.example.com/x", "*", "a b", "-x.example"} {
		_, err := ParseHTTPAPI([]string{"--dashboard-hosts", "ok.example," + bad}, env(nil), io.Discard)
		require.ErrorContains(t, err, "--dashboard-hosts", bad)
	}
}
