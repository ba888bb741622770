package eventlog

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
)

var testLog = For(keyspace.New("test"), "app")

// requireBytes checks that Bytes agrees with the entries' own "t" and "ev"
// sizes, read entry by entry, and returns it.
func requireBytes(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), testLog.Key, "-", "+").Result()
	require.NoError(t, err)
	var want int64
	for _, e := range entries {
		ts, _ := e.Values["t"].(string)
		ev, _ := e.Values["ev"].(string)
		want += int64(len(ts) + len(ev))
	}
	st, err := testLog.Stats(context.Background(), rdb)
	require.NoError(t, err)
	require.Equal(t, want, st.Bytes, "Stats disagrees with the entries")
	return st.Bytes
}

// clientEvent is an event of size bytes of JSON.
func clientEvent(i, size int) string {
	head := fmt.Sprintf(`{"name":"client_event","channel":"private-c","event":"client-x","socket_id":"1.%d","data":"`, i)
	return head + strings.Repeat("x", size-len(head)-2) + `"}`
}

func TestKey(t *testing.T) {
	require.Equal(t, "blue:{app-1}:events", Key(keyspace.New("blue"), "app-1"))
	require.Equal(t, "blue:{app-1}:events", For(keyspace.New("blue"), "app-1").Key)
	require.Equal(t, "blue:{app-1}:events-index", IndexKey(keyspace.New("blue"), "app-1"))
	require.Equal(t, IndexKey(keyspace.New("blue"), "app-1"), For(keyspace.New("blue"), "app-1").Index)
}

// TestCapIsAnArgument: the entry cap reaches XADD from the caller's
// arguments, not from a number written in the Lua.
func TestCapIsAnArgument(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const maxEntries = 10
		for i := range 1000 {
			require.NoError(t, appendScript.Run(ctx, rdb, []string{testLog.Key, testLog.Index}, maxEntries, 0, fmt.Sprintf(`{"i":%d}`, i)).Err())
		}
		n, err := rdb.XLen(ctx, testLog.Key).Result()
		require.NoError(t, err)
		// MAXLEN ~ trims whole macro nodes (100 entries by default).
		require.Less(t, n, int64(200), "the log was not capped near %d entries", maxEntries)
		requireBytes(t, rdb)
	})
}

// TestBytesTrim: the bytes follow the entries whatever removes
// them, with no counter to update: a trim from the head, a deleted log,
// entries from before offsets existed.
func TestBytesTrim(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		require.Zero(t, requireBytes(t, rdb), "no log, no bytes")
		for i := range 10 {
			_, _, err := testLog.Append(ctx, rdb, 0, clientEvent(i, 100+i))
			require.NoError(t, err)
		}
		full := requireBytes(t, rdb)
		entries, err := rdb.XRange(ctx, testLog.Key, "-", "+").Result()
		require.NoError(t, err)
		require.NoError(t, rdb.XTrimMinID(ctx, testLog.Key, entries[6].ID).Err())
		trimmed := requireBytes(t, rdb)
		require.Less(t, trimmed, full)
		require.NoError(t, rdb.XTrimMaxLen(ctx, testLog.Key, 1).Err())
		requireBytes(t, rdb)

		// A deleted log starts again from 0.
		require.NoError(t, rdb.Del(ctx, testLog.Key).Err())
		require.Zero(t, requireBytes(t, rdb))
		_, after, err := testLog.Append(ctx, rdb, 0, clientEvent(0, 100))
		require.NoError(t, err)
		require.Equal(t, requireBytes(t, rdb), after)

		// Entries written before offsets existed count as starting at offset
		// 0, so all but the last of them go uncounted until they are
		// trimmed; the ones after them are counted.
		require.NoError(t, rdb.Del(ctx, testLog.Key).Err())
		for range 3 {
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: testLog.Key, Values: []any{"t", "1", "ev", strings.Repeat("x", 999)}}).Err())
		}
		_, after, err = testLog.Append(ctx, rdb, 0, "{}")
		require.NoError(t, err)
		st, err := testLog.Stats(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, after, st.Bytes)
		require.Equal(t, int64(1000+13+2), st.Bytes)
	})
}
