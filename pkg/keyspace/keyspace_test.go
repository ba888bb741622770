package keyspace_test

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
)

func TestKeyspaceNames(t *testing.T) {
	var zero keyspace.Space
	require.Equal(t, keyspace.DefaultPrefix, zero.Prefix(), "the zero keyspace has the default prefix")
	require.Equal(t, zero, keyspace.New(""))
	ks := keyspace.New("blue")
	require.Equal(t, "blue:{app-1}:", ks.App("app-1"))
	require.Equal(t, "blue:{liveness}:", ks.Tagged("liveness"))
	require.Equal(t, "blue:apps", ks.Name("apps"))
}

func TestGlobEscape(t *testing.T) {
	require.Equal(t, `p:{a\*b\?\[c\]\\}:`, keyspace.GlobEscape(`p:{a*b?[c]\}:`))
}

func scanAll(t *testing.T, rdb redis.UniversalClient, prefix string) []string {
	t.Helper()
	var got []string
	require.NoError(t, keyspace.ScanPrefix(context.Background(), rdb, prefix, func(k string) { got = append(got, k) }))
	slices.Sort(got)
	return slices.Compact(got)
}

func TestScanPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	ctx := context.Background()
	keys := []string{"green:{a*}:x", "green:{a*}:y", "green:{ab}:x", "green:apps", "blue:{a*}:x"}
	check := func(t *testing.T, rdb redis.UniversalClient) {
		for _, k := range keys {
			require.NoError(t, rdb.Set(ctx, k, "1", 0).Err())
		}
		require.Equal(t, []string{"green:{a*}:x", "green:{a*}:y"}, scanAll(t, rdb, "green:{a*}:"), "glob characters match literally")
		require.Equal(t, []string{"green:apps", "green:{a*}:x", "green:{a*}:y", "green:{ab}:x"}, scanAll(t, rdb, "green:"), "no hash tag: every shard")
	}
	t.Run("single", func(t *testing.T) { check(t, redistest.New(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) { check(t, redistest.NewCluster(t).Client(t)) })
}
