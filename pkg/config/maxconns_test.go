package config

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// --max-connections defaults to 0 (derive from the open-file limit), is
// read from the environment and flags like every setting, and refuses a
// negative value naming itself.
func TestMaxConnections(t *testing.T) {
	c, err := ParseHTTPAPI(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.MaxConnections)
	e := env(map[string]string{"HEADCOUNT_MAX_CONNECTIONS": "5000"})
	c, err = ParseHTTPAPI(nil, e, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 5000, c.MaxConnections)
	c, err = ParseHTTPAPI([]string{"--max-connections", "0"}, e, io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.MaxConnections, "flags win")

	_, err = ParseHTTPAPI([]string{"--max-connections", "-1"}, env(nil), io.Discard)
	require.ErrorContains(t, err, "--max-connections: -1 is negative")
	_, err = ParseHTTPAPI(nil, env(map[string]string{"HEADCOUNT_MAX_CONNECTIONS": "many"}), io.Discard)
	require.ErrorContains(t, err, `HEADCOUNT_MAX_CONNECTIONS: "many" is not an integer`)

	for _, tc := range []struct {
		limit uint64
		redis int
		want  int
	}{
		{200, 30, 106},   // 200 - 64 - 30
		{1024, 30, 892},  // 1024 - 102 - 30
		{1024, 650, 272}, // go-redis's pools on 64 CPUs
		{200, 400, 50},   // a quarter of the limit at least
		{100, 0, 50},     // MaxSocketsFor's half
		{1 << 20, 30, 943689},
		{^uint64(0), 30, 989560464969}, // RLIM_INFINITY, read as 2^40
	} {
		require.Equal(t, tc.want, MaxConnectionsFor(tc.limit, tc.redis), "limit %d, redis %d", tc.limit, tc.redis)
	}
}
