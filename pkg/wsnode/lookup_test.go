package wsnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/wsclient"
)

// heldSource is a real apps file without its directory watch (a network
// filesystem's), which counts its reads and, while holding, keeps each
// read's result back until released: a slow database.
type heldSource struct {
	*apps.File
	loads   atomic.Int64
	holding atomic.Bool
	entered chan struct{}
	hold    chan struct{}
}

func (h *heldSource) WatchPaths() []string { return nil }

func (h *heldSource) Load(ctx context.Context) (*apps.Registry, error) {
	h.loads.Add(1)
	reg, err := h.File.Load(ctx)
	if h.holding.Load() {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		select {
		case <-h.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return reg, err
}

// TestUnknownKeyFlood: a flood of handshakes with random keys, each of
// which the node looks up in the apps' source, costs the source a bounded
// number of reads (one at a time, at most two a second), and a client of a
// served app connects while the flood waits on a read. Every flood socket
// gets 4001.
func TestUnknownKeyFlood(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	p := filepath.Join(t.TempDir(), "apps.json")
	require.NoError(t, os.WriteFile(p, []byte(`[{"id":"`+appID+`","key":"`+appKey+`","secret":"`+secret+`"}]`), 0o600))
	src := &heldSource{File: apps.NewFile(p), entered: make(chan struct{}, 1), hold: make(chan struct{})}
	reg, err := src.Load(context.Background())
	require.NoError(t, err)
	n := startNode(t, func(c *config.WSNode) {
		c.Apps, c.AppsSource, c.AppsRefresh = reg, src, 30*time.Second
	}).run(t)
	src.loads.Store(0)
	src.holding.Store(true)

	const flood = 2000
	began := time.Now()
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range flood {
		wg.Go(func() {
			c, err := wsclient.Dial(n.Addr(), fmt.Sprintf("/app/flood-%d?protocol=7", i))
			if err != nil {
				t.Errorf("dial: %v", err)
				return
			}
			defer c.Close()
			if msg, err := c.Read(30 * time.Second); err == nil && strings.Contains(msg, `\"code\":4001`) {
				refused.Add(1)
			} else {
				t.Errorf("flood socket %d: %q, %v", i, msg, err)
			}
		})
	}
	select {
	case <-src.entered:
	case <-time.After(wait):
		src.holding.Store(false)
		close(src.hold)
		wg.Wait()
		t.Fatal("the flood's unknown keys never read the apps' source")
	}
	// A read is held, with the flood waiting on it: a served key does not.
	n.connectKey(t, appKey)
	src.holding.Store(false)
	close(src.hold)
	wg.Wait()
	elapsed := time.Since(began)
	require.Equal(t, int64(flood), refused.Load())
	require.LessOrEqual(t, src.loads.Load(), int64(2+elapsed/(500*time.Millisecond)),
		"reads of the source for %d unknown keys in %v", flood, elapsed)
	t.Logf("%d unknown keys in %v: %d reads", flood, elapsed.Round(time.Millisecond), src.loads.Load())
}
