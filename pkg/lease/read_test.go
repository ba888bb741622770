package lease

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/redisx/redistest"
)

// TestRead: nobody, then a holder with its TTL, then a failover shows
// another holder.
func TestRead(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	st, err := Read(ctx, rdb, CleanerKey(keyspace.Space{}))
	require.NoError(t, err)
	require.Equal(t, Status{}, st, "no cleaner has run")

	first := New(rdb, CleanerKey(keyspace.Space{}), 3*time.Second)
	ok, err := first.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	st, err = Read(ctx, rdb, CleanerKey(keyspace.Space{}))
	require.NoError(t, err)
	require.True(t, st.Held)
	require.Equal(t, first.Token()[:holderIDLength], st.Holder)
	require.Greater(t, st.ExpiresIn, time.Second)
	require.LessOrEqual(t, st.ExpiresIn, 3*time.Second)

	require.NoError(t, first.Release(ctx))
	st, err = Read(ctx, rdb, CleanerKey(keyspace.Space{}))
	require.NoError(t, err)
	require.False(t, st.Held)

	second := New(rdb, CleanerKey(keyspace.Space{}), 3*time.Second)
	ok, err = second.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	st, err = Read(ctx, rdb, CleanerKey(keyspace.Space{}))
	require.NoError(t, err)
	require.True(t, st.Held)
	require.Equal(t, second.Token()[:holderIDLength], st.Holder)
	require.NotEqual(t, first.Token()[:holderIDLength], st.Holder, "a failover shows a new holder")
}
