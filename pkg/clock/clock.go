package clock

import (
	"context"
	"time"
)

// Sleep waits d and reports whether ctx is still live: false if ctx ended
// first (Sleep then returns at once).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
