package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/logging"
)

// loadNode gives node, through its recorder, chans channels, a presence
// member in each of members presence channels and conns connections, and
// returns the recorder.
func loadNode(t testing.TB, rdb redis.UniversalClient, app, node string, chans, members, conns int) *Recorder {
	t.Helper()
	r := newRecorder(t, rdb, node)
	for i := range chans {
		r.Add(app, fmt.Sprintf("ch%d", i), int64(1+i%3))
	}
	for i := range members {
		ch := fmt.Sprintf("presence-%d", i)
		r.Add(app, ch, 1)
		r.AddMember(app, ch, "u-"+node, json.RawMessage(`{}`), 1)
	}
	r.AddConnections(app, int64(conns))
	require.NoError(t, r.Flush(context.Background()))
	return r
}

// reapFields lists up to n fields of the contribution under reap id, as a
// drain's HSCAN would.
func reapFields(t *testing.T, rdb redis.UniversalClient, app, id string, n int) []string {
	t.Helper()
	kv, _, err := rdb.HScan(context.Background(), testKeys.reapingKey(app, id), 0, "", int64(n)).Result()
	require.NoError(t, err)
	var out []string
	for i := 0; i < len(kv) && len(out) < n; i += 2 {
		out = append(out, kv[i])
	}
	return out
}

// Two cleaners reaping the same node at once, and a third draining the
// reap they race on (FinishReaps): one starts the reap, the others find the
// node gone, and every field is subtracted exactly once, each member's
// leave and each channel's new count reported by exactly one of them.
func TestReapSlicedConcurrentReapers(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		loadNode(t, rdb, "app", "live", 40, 5, 3)
		loadNode(t, rdb, "app", "dead", 200, 60, 7)
		before := takeSnapshot(t, rdb, "app")
		deadFields := len(before.contrib["dead"])

		var mu sync.Mutex
		var all []Reaped
		starts := 0
		var wg sync.WaitGroup
		for k := range 3 {
			wg.Go(func() {
				s := NewStore(rdb, testKeys.ks)
				s.SliceSize = 1 + k
				if k == 2 {
					// The third joins whatever drain is under way.
					for {
						done, err := s.FinishReaps(ctx, "app")
						require.NoError(t, err)
						mu.Lock()
						for _, r := range done {
							all = append(all, r)
						}
						mu.Unlock()
						n, err := s.Nodes(ctx, "app", 0)
						require.NoError(t, err)
						if n.Registered == 1 && n.Reaping == 0 {
							return
						}
					}
				}
				ok, reaped, err := s.ReapNode(ctx, "app", "dead", 0)
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				if ok {
					starts++
					all = append(all, reaped)
				}
			})
		}
		wg.Wait()
		require.Equal(t, 1, starts, "one reaper starts the reap")

		after := takeSnapshot(t, rdb, "app")
		checkInvariants(t, after)
		require.Equal(t, []string{"live"}, mapKeys(after.contrib))

		// Every field once, every edge once.
		fields := 0
		chans := map[string]int64{}
		leaves := map[string]int{}
		for _, r := range all {
			fields += r.Fields
			for ch, n := range r.Channels {
				_, dup := chans[ch]
				require.False(t, dup, "channel %s reported twice", ch)
				chans[ch] = n
			}
			for _, m := range r.Members {
				require.False(t, m.Added)
				leaves[m.Channel+"\n"+m.UserID]++
			}
		}
		require.Equal(t, deadFields, fields)
		require.Len(t, chans, 260)
		for ch, n := range chans {
			require.Equal(t, after.global[ch], n, "channel %s", ch)
		}
		require.Len(t, leaves, 60)
		for m, n := range leaves {
			require.Equal(t, 1, n, "member %q left %d times", m, n)
		}
	})
}

// A node reaped while alive resumes and republishes while its old
// contribution is half reaped: the slices left subtract only the old one,
// and the new one stands whole.
func TestReapSlicedZombieRepublishes(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		loadNode(t, rdb, "app", "other", 10, 3, 2)
		zombie := loadNode(t, rdb, "app", "zombie", 30, 10, 4)

		id, ok, reaped, err := store.startReap(ctx, "app", "zombie", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		for range 3 {
			require.NoError(t, store.reapSlice(ctx, "app", id, reapFields(t, rdb, "app", id, 4), &reaped))
			checkInvariants(t, takeSnapshot(t, rdb, "app"))
		}

		// The zombie's next write is refused (it is unregistered), and it
		// republishes its whole truth, with a change made meanwhile.
		zombie.Add("app", "ch0", 5)
		zombie.AddMember("app", "presence-0", "u-zombie", json.RawMessage(`{}`), 1)
		require.NoError(t, zombie.Flush(ctx))
		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, localFields(zombie, "app"), s.contrib["zombie"])

		require.NoError(t, store.drain(ctx, "app", id, &reaped))
		s = takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, localFields(zombie, "app"), s.contrib["zombie"], "the republished contribution stands whole")
		require.Equal(t, []string{"other", "zombie"}, mapKeys(s.contrib), "no reap is left under way")
		n, err := store.Nodes(ctx, "app", 0)
		require.NoError(t, err)
		require.Zero(t, n.Reaping)
	})
}

// A reap its cleaner left half done: the globals still hold the rest, an
// audit meanwhile sees no drift (the rest counts as a contribution), and
// FinishReaps subtracts the rest and reports it.
func TestReapSlicedLeftHalfDone(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		loadNode(t, rdb, "app", "other", 5, 2, 1)
		loadNode(t, rdb, "app", "dead", 20, 4, 3)

		id, ok, reaped, err := store.startReap(ctx, "app", "dead", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, store.reapSlice(ctx, "app", id, reapFields(t, rdb, "app", id, 5), &reaped))
		require.Equal(t, 5, reaped.Fields)

		n, err := store.Nodes(ctx, "app", 0)
		require.NoError(t, err)
		require.Equal(t, NodeCount{Registered: 1, Stale: 1, Reaping: 1}, n)
		d, err := store.Audit(ctx, "app")
		require.NoError(t, err)
		require.False(t, d.Found(), "a reap under way is no drift: %+v", d.Diffs)
		// Repair reads the reap under way as a contribution too.
		_, err = store.Repair(ctx, "app", Drift{Diffs: []Difference{{Kind: KindChannel, Channel: "ch1"}, {Kind: KindConns}}})
		require.NoError(t, err)
		checkInvariants(t, takeSnapshot(t, rdb, "app"))

		done, err := store.FinishReaps(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, 20+4+4+1-5, done["dead"].Fields)
		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, []string{"other"}, mapKeys(s.contrib))
		n, err = store.Nodes(ctx, "app", 0)
		require.NoError(t, err)
		require.Zero(t, n.Reaping)
	})
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A reap in slices of one field logs each slice's events in its own unit,
// and member leaves before any channel's vacated: the order one unit
// would log them in, so a webhook consumer never hears of a member of a
// vacated channel.
func TestReapSlicedLogsMembersBeforeVacated(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		logs := func(string) eventlog.Spec { return logAll }
		r := NewRecorder(rdb, "n", RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t), LogEvents: logs})
		for i := range 4 {
			ch := fmt.Sprintf("presence-%d", i)
			r.Add("app", ch, 2)
			r.AddMember("app", ch, "u1", json.RawMessage(`{}`), 1)
			r.AddMember("app", ch, "u2", json.RawMessage(`{}`), 1)
		}
		require.NoError(t, r.Flush(ctx))
		claimAll(t, rdb, "app") // delivered: the reap's changes log new markers
		before := len(eventLog(t, rdb, "app"))

		s := NewStore(rdb, testKeys.ks)
		s.LogEvents, s.SliceSize = logs, 1
		ok, reaped, err := s.ReapNode(ctx, "app", "n", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 12, reaped.Fields)
		require.Len(t, reaped.Members, 8)
		require.Len(t, reaped.Vacated(), 4)

		events := eventLog(t, rdb, "app")[before:]
		require.Len(t, events, 12)
		for i, e := range events {
			if i < 8 {
				require.True(t, strings.HasPrefix(e, "member_removed "), "%d: %s", i, e)
			} else {
				require.True(t, strings.HasPrefix(e, "channel_vacated "), "%d: %s", i, e)
			}
		}
	})
}

// A node republishes over a large contribution of its own (the same id
// restarted with another truth) in units of three fields, while a reader
// checks the invariants and a cleaner reaps it while alive: the invariants
// hold at every read, the republish converges to the local truth, and a
// member both contributions hold is never announced as leaving.
func TestRepublishInSlices(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		loadNode(t, rdb, "app", "other", 5, 2, 1)
		loadNode(t, rdb, "app", "n", 60, 20, 3)

		var mu sync.Mutex
		var edges []Edges
		r := NewRecorder(rdb, "n", RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t), SliceSize: 3,
			OnFlushed: func(e Edges) { mu.Lock(); edges = append(edges, e); mu.Unlock() }})
		for i := range 40 { // ch0..ch39 stay, ch40..ch59 go, ch60..ch79 come
			r.Add("app", fmt.Sprintf("ch%d", 20+i*3/2), 1)
		}
		for i := range 20 {
			ch := fmt.Sprintf("presence-%d", i)
			r.Add("app", ch, 1)
			r.AddMember("app", ch, "u-n", json.RawMessage(`{}`), 1)
		}

		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				checkInvariants(t, takeSnapshot(t, rdb, "app"))
			}
		})
		store := NewStore(rdb, testKeys.ks)
		store.SliceSize = 2
		for i := range 4 {
			require.NoError(t, r.Flush(ctx))
			if i == 1 {
				_, _, err := store.ReapNode(ctx, "app", "n", 0)
				require.NoError(t, err)
			}
			require.NoError(t, r.Heartbeat(ctx))
		}
		close(stop)
		wg.Wait()

		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, localFields(r, "app"), s.contrib["n"])
		require.Equal(t, []string{"n", "other"}, mapKeys(s.contrib), "no reap is left under way")
		mu.Lock()
		defer mu.Unlock()
		var firstLeaves []string
		for _, e := range edges[:1] {
			for _, m := range e.Members {
				if !m.Added {
					firstLeaves = append(firstLeaves, m.Channel)
				}
			}
		}
		require.Empty(t, firstLeaves, "the first republish keeps every member")
	})
}

// Slices of one reap in flight at once, as a drain sends them and as two
// drains of the same reap do, with fields that overlap (a field in several
// slices, as a scan may return it twice and as two drains each take it,
// and twice in one slice),
// while the reaped node republishes a new contribution: each field is
// subtracted once, by the one slice that finds it, and each channel's new
// count and each member's leave is reported once.
func TestReapSlicesOverlappingInFlight(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		loadNode(t, rdb, "app", "other", 30, 10, 2)
		zombie := loadNode(t, rdb, "app", "zombie", 150, 40, 5)
		id, ok, reaped, err := store.startReap(ctx, "app", "zombie", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		fields, err := rdb.HKeys(ctx, testKeys.reapingKey("app", id)).Result()
		require.NoError(t, err)
		require.Len(t, fields, 150+2*40+1)

		const reapers = 6
		var mu sync.Mutex
		all := []Reaped{reaped}
		var wg sync.WaitGroup
		for k := range reapers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(k), 1))
				mine := slices.Clone(fields)
				rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
				for len(mine) > 0 {
					n := min(1+rng.IntN(9), len(mine))
					// A field twice in one slice, as a drain may batch
					// two scan replies that both return it.
					slice := append(slices.Clone(mine[:n]), mine[rng.IntN(n)])
					var r Reaped
					require.NoError(t, store.reapSlice(ctx, "app", id, slice, &r))
					mine = mine[n:]
					mu.Lock()
					all = append(all, r)
					mu.Unlock()
				}
			})
		}
		// The zombie's write is refused (it was unregistered) and it
		// republishes whole while the slices run.
		wg.Go(func() {
			zombie.Add("app", "ch1", 2)
			require.NoError(t, zombie.Flush(ctx))
			checkInvariants(t, takeSnapshot(t, rdb, "app"))
		})
		wg.Wait()

		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, localFields(zombie, "app"), s.contrib["zombie"], "the republished contribution stands whole")
		require.Equal(t, []string{"other", "zombie"}, mapKeys(s.contrib), "no reap is left under way")
		subtracted := 0
		chans := map[string]int{}
		leaves := map[string]int{}
		for _, r := range all {
			subtracted += r.Fields
			for ch := range r.Channels {
				chans[ch]++
			}
			for _, m := range r.Members {
				leaves[m.Channel+"\n"+m.UserID]++
			}
		}
		require.Equal(t, len(fields), subtracted, "every field subtracted once")
		for ch, n := range chans {
			require.Equal(t, 1, n, "channel %s reported %d times", ch, n)
		}
		for m, n := range leaves {
			require.Equal(t, 1, n, "member %q left %d times", m, n)
		}
	})
}

// FinishReaps leaves a reap its own store drains now to that drain (the
// cleaner's scan would otherwise walk a reap its liveness check is
// draining), and drains it once that drain has stopped.
func TestFinishReapsLeavesOwnDrains(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := newSingle(t)
	store := NewStore(rdb, testKeys.ks)
	loadNode(t, rdb, "app", "dead", 20, 4, 3)
	id, ok, _, err := store.startReap(ctx, "app", "dead", 0, "", "")
	require.NoError(t, err)
	require.True(t, ok)

	store.setDraining("app", id, true)
	done, err := store.FinishReaps(ctx, "app")
	require.NoError(t, err)
	require.Empty(t, done)
	n, err := store.Nodes(ctx, "app", 0)
	require.NoError(t, err)
	require.Equal(t, 1, n.Reaping)

	store.setDraining("app", id, false)
	done, err = store.FinishReaps(ctx, "app")
	require.NoError(t, err)
	require.Equal(t, 20+4+4+1, done["dead"].Fields)
	checkInvariants(t, takeSnapshot(t, rdb, "app"))
}

// A drain slices a contribution in name order, not in HSCAN's hash order
// (sortWindow): each slice's channels are neighbours by name, so their
// removals from the global sorted set walk paths the cache holds. A slice
// is one unit, and a unit gives its channels one version, so the channels
// reported under one version are one slice's.
func TestReapSlicesInNameOrder(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const chans, perSlice = 300, 4
		r := newRecorder(t, rdb, "dead")
		for i := range chans {
			r.Add("app", fmt.Sprintf("ch%03d", i), 1)
		}
		require.NoError(t, r.Flush(ctx))
		s := NewStore(rdb, testKeys.ks)
		s.SliceSize = perSlice * slicesInFlight / reapShare
		ok, reaped, err := s.ReapNode(ctx, "app", "dead", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, reaped.Channels, chans, "every channel vacated")

		slice := map[int64][]int{} // version -> its channels' numbers
		for ch, v := range reaped.Versions {
			var i int
			_, err := fmt.Sscanf(ch, "ch%03d", &i)
			require.NoError(t, err)
			slice[v] = append(slice[v], i)
		}
		require.Len(t, slice, (chans+perSlice-1)/perSlice)
		for _, is := range slice {
			slices.Sort(is)
			require.Equal(t, len(is)-1, is[len(is)-1]-is[0], "a slice of channels that are not neighbours: %v", is)
		}
	})
}
