package clock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSleepWaits(t *testing.T) {
	start := time.Now()
	require.True(t, Sleep(context.Background(), 20*time.Millisecond), "a live context reported as ended")
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "returned before its delay")
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	start := time.Now()
	require.False(t, Sleep(ctx, time.Minute), "an ended context reported as live")
	require.Less(t, time.Since(start), 10*time.Second, "kept sleeping after its context ended")
}
