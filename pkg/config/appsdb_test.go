package config

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAppsDB: --apps-db, or soketi's own variables, put the apps in a
// database: validated without a dial, loaded later by the binary's
// reloader; a conflict between sources, or default-app variables beside
// them, exits 2 naming the settings; the password never shows.
func TestAppsDB(t *testing.T) {
	c, err := ParseWSNode([]string{"--apps-db", "postgres://u:hunter2@db:5432/main", "--apps-db-table", "tenants"}, env(nil), io.Discard)
	require.NoError(t, err)
	require.False(t, c.Apps.Loaded(), "nothing is read before the reloader runs")
	require.Equal(t, "postgres apps table tenants at db:5432/main", c.AppsSource.String())

	h, err := ParseHTTPAPI(nil, env(map[string]string{"SOKETI_APP_MANAGER_DRIVER": "mysql", "SOKETI_DB_MYSQL_HOST": "mysql", "SOKETI_DB_MYSQL_PASSWORD": "hunter2"}), io.Discard)
	require.NoError(t, err)
	require.Contains(t, h.AppsSource.String(), "mysql apps table apps at mysql:3306")
	require.NotContains(t, h.AppsSource.String(), "hunter2")

	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad url":              {[]string{"--apps-db", "oracle://u:hunter2@db/x"}, nil, "--apps-db"},
		"bad table":            {[]string{"--apps-db", "postgres://u:hunter2@db/x", "--apps-db-table", "apps; drop"}, nil, "--apps-db"},
		"file and db":          {[]string{"--apps-db", "postgres://u:hunter2@db/x", "--apps-file", "/x.json"}, nil, "--apps-file and --apps-db"},
		"driver and db":        {[]string{"--apps-db", "postgres://u:hunter2@db/x"}, map[string]string{"SOKETI_APP_MANAGER_DRIVER": "postgres"}, "SOKETI_APP_MANAGER_DRIVER is set beside"},
		"dynamodb":             {nil, map[string]string{"SOKETI_APP_MANAGER_DRIVER": "dynamodb"}, "SOKETI_APP_MANAGER_DRIVER"},
		"default app variable": {[]string{"--apps-db", "postgres://u:hunter2@db/x"}, map[string]string{"HEADCOUNT_APP_KEY": "k"}, "HEADCOUNT_APP_KEY: set beside --apps-db"},
		"soketi app variable":  {nil, map[string]string{"SOKETI_APP_MANAGER_DRIVER": "postgres", "SOKETI_DEFAULT_APP_ID": "1"}, "SOKETI_DEFAULT_APP_ID: set beside SOKETI_APP_MANAGER_DRIVER"},
	} {
		_, err := ParseWSNode(tc.args, env(tc.env), io.Discard)
		require.ErrorContains(t, err, tc.want, name)
		require.NotContains(t, err.Error(), "hunter2", name)
	}
}

func TestSoketiCacheVariablesAreNamed(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(map[string]string{"SOKETI_APP_MANAGER_DRIVER": "postgres", "SOKETI_APP_MANAGER_CACHE_TTL": "3600"}), io.Discard)
	require.NoError(t, err)
	require.Len(t, c.AppsIgnored, 1)
	require.Contains(t, c.AppsIgnored[0], "SOKETI_APP_MANAGER_CACHE_TTL is ignored")
}
