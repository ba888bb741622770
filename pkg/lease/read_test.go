package lease

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
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

// TestReadNamedHolder: a named contender shows as its name and the start of
// its random part, so a restart under the same name is still a new holder.
func TestReadNamedHolder(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	key := CleanerKey(keyspace.Space{})
	first := NewNamed(rdb, key, 3*time.Second, "cleaner-1")
	require.True(t, strings.HasPrefix(first.Token(), "cleaner-1/"), first.Token())
	ok, err := first.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	st, err := Read(ctx, rdb, key)
	require.NoError(t, err)
	require.Equal(t, "cleaner-1/"+strings.TrimPrefix(first.Token(), "cleaner-1/")[:holderIDLength], st.Holder)
	require.NotContains(t, first.Token()[len("cleaner-1/")+holderIDLength:], "/")

	require.NoError(t, first.Release(ctx))
	again := NewNamed(rdb, key, 3*time.Second, "cleaner-1")
	ok, err = again.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	st2, err := Read(ctx, rdb, key)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(st2.Holder, "cleaner-1/"), st2.Holder)
	require.NotEqual(t, st.Holder, st2.Holder, "a restarted holder of the same name is a new holder")
}
