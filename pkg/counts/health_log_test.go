package counts

import (
	"context"
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
)

// TestRecorderClaimsRedisOnlyAfterAWrite: a flush with nothing to write
// asks Redis nothing, so it neither logs "counts reach Redis" nor makes
// the recorder healthy; a write that fails is a warning, even the first;
// a write that lands does both.
func TestRecorderClaimsRedisOnlyAfterAWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs proctest.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})

	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t)), MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	r := NewRecorder(dead, "n", RecorderOptions{Logger: log})
	require.NoError(t, r.Flush(ctx), "nothing to write: nothing failed")
	require.False(t, r.Healthy())
	require.NotContains(t, logs.String(), "counts reach Redis")
	r.Add("app", "x", 1)
	require.Error(t, r.Flush(ctx))
	require.False(t, r.Healthy())
	require.NotContains(t, logs.String(), "counts reach Redis")
	require.Contains(t, logs.String(), "[WARN]  counts: cannot write counts to Redis", "unreachable from the start is said too")

	r = NewRecorder(redistest.New(t).Client(t), "n", RecorderOptions{Logger: log})
	require.NoError(t, r.Flush(ctx))
	require.NotContains(t, logs.String(), "counts reach Redis", "still nothing written")
	r.Add("app", "x", 1)
	require.NoError(t, r.Flush(ctx))
	require.True(t, r.Healthy())
	require.Contains(t, logs.String(), "counts reach Redis")
}
