package resume

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/luascript"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestScripts: the script's header and names hold (luascript.Check).
func TestScripts(t *testing.T) {
	for _, p := range luascript.Check(scriptFiles, "scripts", []*luascript.Script{saveScript}) {
		t.Error(p)
	}
}

// TestSaveNeverMovesBack: a late save of an older serial (an old
// connection's close after the newer one's checkpoint) leaves the newer
// one, serials of different lengths compare as numbers, and the hash
// expires with the TTL given.
func TestSaveNeverMovesBack(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) { testSave(t, rdb) })
}

func testSave(t *testing.T, rdb redis.UniversalClient) {
	s := New(rdb, keyspace.Space{})
	ctx := context.Background()
	require.NoError(t, s.Save(ctx, "a", []Save{{ID: "page-0001", TTL: time.Minute,
		Serials: map[string]string{"c1": "100-5", "c2": "99-0"}}, {ID: "page-0002", TTL: time.Minute,
		Serials: map[string]string{"c1": "7-0"}}}))
	require.NoError(t, s.Save(ctx, "a", []Save{{ID: "page-0001", TTL: time.Minute,
		Serials: map[string]string{"c1": "100-4", "c2": "100-0", "c3": "1-0"}}}))
	got, err := s.Load(ctx, "a", "page-0001")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"c1": "100-5", "c2": "100-0", "c3": "1-0"}, got)
	require.NoError(t, s.Save(ctx, "a", []Save{{ID: "page-0001", TTL: time.Minute, Serials: map[string]string{"c1": "99-9999"}}}))
	got, err = s.Load(ctx, "a", "page-0001")
	require.NoError(t, err)
	require.Equal(t, "100-5", got["c1"])
	ttl, err := rdb.PTTL(ctx, s.state("a", "page-0001")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second)
	got, err = s.Load(ctx, "b", "page-0001")
	require.NoError(t, err)
	require.Empty(t, got)
}
