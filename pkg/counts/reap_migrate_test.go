package counts

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// A large node's reap drained by two cleaners, many slices in flight each,
// while the app's slot moves to another master a key at a time (slices
// meet ASK and TRYAGAIN, a scan's cursor may continue on the new master):
// when the reap is done, whoever drained it and however often a drain
// failed, every field was subtracted once and the counts are exact.
func TestReapSlicedDuringSlotMigration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster in -short")
	}
	cluster := redistest.NewCluster(t)
	rdb := cluster.Client(t)
	ctx := context.Background()
	loadNode(t, rdb, "app", "live", 40, 10, 2)
	loadNode(t, rdb, "app", "dead", 600, 120, 9)
	fields := len(takeSnapshot(t, rdb, "app").contrib["dead"])

	var mu sync.Mutex
	var all []Reaped
	record := func(r Reaped) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, r)
	}
	done := func() bool {
		n, err := NewStore(rdb, testKeys.ks).Nodes(ctx, "app", 0)
		return err == nil && n.Registered == 1 && n.Reaping == 0
	}
	var failures atomic.Int64
	var wg sync.WaitGroup
	migrated := make(chan struct{})
	wg.Go(func() {
		defer close(migrated)
		migrateSlot(t, cluster, "app")
	})
	for k := range 2 {
		wg.Go(func() {
			s := NewStore(rdb, testKeys.ks)
			s.SliceSize = 3 + k
			if k == 0 {
				ok, reaped, err := s.ReapNode(ctx, "app", "dead", 0)
				require.True(t, ok || err != nil, "the first reaper starts the reap")
				if err != nil {
					failures.Add(1)
				}
				record(reaped)
			}
			// Drain until the reap is gone and the migration over; a
			// drain that fails (its slice met the moving slot once too
			// often) is left to the next, as the cleaner's scan does.
			assert.Eventually(t, func() bool {
				got, err := s.FinishReaps(ctx, "app")
				if err != nil {
					failures.Add(1)
				}
				for _, r := range got {
					record(r)
				}
				select {
				case <-migrated:
					return done()
				default:
					return false
				}
			}, time.Minute, 2*time.Millisecond)
		})
	}
	wg.Wait()
	t.Logf("%d drains failed on the moving slot and were taken up again", failures.Load())

	s := takeSnapshot(t, rdb, "app")
	checkInvariants(t, s)
	require.Equal(t, []string{"live"}, mapKeys(s.contrib))
	subtracted := 0
	chans := map[string]int{}
	for _, r := range all {
		subtracted += r.Fields
		for ch := range r.Channels {
			chans[ch]++
		}
	}
	require.Equal(t, fields, subtracted, "every field subtracted once")
	for ch, n := range chans {
		require.Equal(t, 1, n, "channel %s reported %d times", ch, n)
	}
}

// migrateSlot moves app's slot to another master a key at a time, as
// redis-cli --cluster reshard does (IMPORTING, MIGRATING, MIGRATE, then
// SETSLOT NODE on every master), pausing between keys so the reapers
// meet it half done.
func migrateSlot(t *testing.T, c *redistest.Cluster, app string) {
	t.Helper()
	ctx := context.Background()
	masters := make([]*redis.Client, len(c.Nodes))
	ids := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		masters[i] = redis.NewClient(&redis.Options{Addr: n.Addr})
		t.Cleanup(func() { _ = masters[i].Close() })
		var err error
		ids[i], err = masters[i].ClusterMyID(ctx).Result()
		require.NoError(t, err)
	}
	tag := strings.TrimSuffix(testKeys.appPrefix(app), ":")
	slot, err := masters[0].ClusterKeySlot(ctx, tag).Result()
	require.NoError(t, err)
	src := -1
	for i, m := range masters {
		keys, err := m.ClusterCountKeysInSlot(ctx, int(slot)).Result()
		require.NoError(t, err)
		if keys > 0 {
			src = i
		}
	}
	require.GreaterOrEqual(t, src, 0, "no master holds the app's keys")
	dst := (src + 1) % len(masters)
	host, port, _ := net.SplitHostPort(c.Nodes[dst].Addr)
	do := func(m *redis.Client, args ...any) {
		require.NoError(t, m.Do(ctx, args...).Err(), "%v", args)
	}
	do(masters[dst], "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
	do(masters[src], "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
	moved := 0
	for ; ; moved++ {
		keys, err := masters[src].ClusterGetKeysInSlot(ctx, int(slot), 1).Result()
		require.NoError(t, err)
		if len(keys) == 0 {
			break
		}
		do(masters[src], "MIGRATE", host, port, keys[0], 0, 5000)
		time.Sleep(2 * time.Millisecond) // pace: let slices run between keys
	}
	for _, i := range []int{dst, src, 3 - src - dst} {
		do(masters[i], "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
	}
	t.Logf("slot %d moved from master %d to %d, %d keys", slot, src, dst, moved)
}
