package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// liveCounts is what every read must return: the sum of the registered
// nodes' contributions, and of their retires under way (a live node's
// republish), other reaps under way left out.
type liveCounts struct {
	channels map[string]int64           // channel -> sockets
	users    map[string]map[string]bool // presence channel -> its users
	conns    int64
}

// registeredSum sums the registered contributions of an atomic snapshot,
// retires under way of registered nodes included.
func registeredSum(s snapshot) liveCounts {
	lc := liveCounts{channels: map[string]int64{}, users: map[string]map[string]bool{}}
	members := map[string]int64{}
	for node, c := range s.contrib {
		if id, ok := strings.CutPrefix(node, "reaping:"); ok {
			// A retire counts while its node is registered (has an epoch).
			_, of, _ := strings.Cut(id, ":")
			if _, registered := s.epochs[of]; !strings.HasPrefix(id, retirePrefix) || !registered {
				continue
			}
		}
		for f, n := range c {
			switch kind, ch, _ := parseField(f); kind {
			case 'c':
				lc.channels[ch] += n
			case 'm':
				members[strings.TrimPrefix(f, "m:")] += n
			case 'n':
				lc.conns += n
			}
		}
	}
	for f, n := range members {
		if n > 0 {
			ch, user, _ := strings.Cut(f, "\n")
			if lc.users[ch] == nil {
				lc.users[ch] = map[string]bool{}
			}
			lc.users[ch][user] = true
		}
	}
	return lc
}

// readers are checkReads' Store and Listings for one client, kept across
// calls as httpapi keeps its own for its life: each read then starts by
// declaring the reaps the last one found, which the reaps started and
// ended since have made stale.
type readers struct {
	store *Store
	l     *Listings
}

var readersOf sync.Map // redis.UniversalClient -> *readers

// checkReads runs every read of counts the package serves and requires
// each to equal want, for the channels chans (their universe: names that
// may or may not be occupied). MembersAt and AreMembers read the globals,
// as the member edges they pair with (checkEdgeReads).
func checkReads(t *testing.T, rdb redis.UniversalClient, app string, want liveCounts, chans []string) {
	t.Helper()
	// assert, not require: a failure names every read that is wrong.
	defer func() {
		if t.Failed() {
			t.FailNow()
		}
	}()
	ctx := context.Background()
	rs, _ := readersOf.LoadOrStore(rdb, &readers{NewStore(rdb, testKeys.ks), NewListings(rdb, ListingOptions{CacheTTL: -1, ScanCount: 3})})
	store, l := rs.(*readers).store, rs.(*readers).l

	all, err := store.Channels(ctx, app, "")
	require.NoError(t, err)
	assert.Equal(t, want.channels, all, "Channels")
	board := leaderboard(want.channels)

	p := rdb.Pipeline()
	pending := map[string]*PendingCounts{}
	for _, ch := range chans {
		pending[ch] = store.QueueCounts(ctx, p, app, ch, strings.HasPrefix(ch, "presence-"))
	}
	_, _ = p.Exec(ctx)
	for _, ch := range chans {
		n, err := store.Channel(ctx, app, ch)
		require.NoError(t, err)
		assert.Equal(t, want.channels[ch], n, "Channel %s", ch)

		subs, u, err := pending[ch].Result(ctx)
		require.NoError(t, err)
		assert.Equal(t, want.channels[ch], subs, "QueueCounts %s", ch)
		assert.Equal(t, int64(len(want.users[ch])), u, "QueueCounts users of %s", ch)

		st, _, err := l.Channel(ctx, app, ch, true, true)
		require.NoError(t, err)
		assert.Equal(t, want.channels[ch], st.Subscriptions, "Listings.Channel %s", ch)
		assert.Equal(t, int64(slices.Index(board, ch)+1), st.Rank, "rank of %s in %v", ch, board)
		load, err := store.ChannelLoad(ctx, app, "reader", ch)
		require.NoError(t, err)
		assert.Equal(t, int64(len(want.channels)), load.Channels, "ChannelLoad's channels")
		assert.Equal(t, want.channels[ch] > 0, load.Occupied, "ChannelLoad: %s occupied", ch)
		if want.channels[ch] > 0 {
			assert.Equal(t, int64(len(want.users[ch])), st.Users, "Listings.Channel users of %s", ch)
		}
	}

	top, _, err := l.Top(ctx, app, 1000)
	require.NoError(t, err)
	tops := map[string]int64{}
	for i, c := range top {
		tops[c.Name] = c.Count
		if i > 0 {
			assert.GreaterOrEqual(t, top[i-1].Count, c.Count, "Top's order")
		}
	}
	assert.Equal(t, want.channels, tops, "Top")
	for _, limit := range []int{1, 2} {
		top, _, err := l.Top(ctx, app, limit)
		require.NoError(t, err)
		names := []string{}
		for _, c := range top {
			names = append(names, c.Name)
			assert.Equal(t, want.channels[c.Name], c.Count, "Top(%d)'s count of %s", limit, c.Name)
		}
		assert.Equal(t, board[:min(limit, len(board))], names, "Top(%d) of %v", limit, want.channels)
	}
	for _, c := range walk(t, l, app, "", 2, nil) {
		assert.Equal(t, want.channels[c.Name], c.Count, "page count of %s", c.Name)
	}
	ls, err := l.ReadListing(ctx, app, ListingQuery{Users: true})
	require.NoError(t, err)
	assert.Equal(t, want.channels, ls.Channels, "ReadListing")

	var presence []string
	for _, ch := range chans {
		if strings.HasPrefix(ch, "presence-") {
			presence = append(presence, ch)
		}
	}
	uc, err := store.UserCounts(ctx, app, presence)
	require.NoError(t, err)
	for _, ch := range presence {
		assert.Equal(t, int64(len(want.users[ch])), uc[ch], "UserCounts %s", ch)
		n, err := store.UserCount(ctx, app, ch)
		require.NoError(t, err)
		assert.Equal(t, int64(len(want.users[ch])), n, "UserCount %s", ch)
		if ls.Channels[ch] > 0 {
			assert.Equal(t, int64(len(want.users[ch])), ls.Users[ch], "ReadListing users of %s", ch)
		}
		m, err := store.Members(ctx, app, ch)
		require.NoError(t, err)
		assert.ElementsMatch(t, slices.Collect(maps.Keys(want.users[ch])), slices.Collect(maps.Keys(m)), "Members %s", ch)
	}
	conns, err := store.Connections(ctx, app)
	require.NoError(t, err)
	assert.Equal(t, want.conns, conns, "Connections")
}

// leaderboard orders the occupied channels of counts as Top does: most
// first, equal counts in reverse name order.
func leaderboard(counts map[string]int64) []string {
	out := append([]string{}, slices.Collect(maps.Keys(counts))...)
	slices.SortFunc(out, func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(b, a)
	})
	return out
}

// checkEdgeReads requires MembersAt and AreMembers of each of chans to
// list the global members of snapshot s, as the member edges are of the
// globals: a subscriber's list must change only by edges.
func checkEdgeReads(t *testing.T, rdb redis.UniversalClient, app string, s snapshot, chans, users []string) {
	t.Helper()
	ctx := context.Background()
	store := NewStore(rdb, testKeys.ks)
	for _, ch := range chans {
		global := map[string]bool{}
		for f := range s.members {
			if c, u, _ := strings.Cut(f, "\n"); c == ch {
				global[u] = true
			}
		}
		m, _, err := store.MembersAt(ctx, app, ch)
		require.NoError(t, err)
		require.ElementsMatch(t, slices.Collect(maps.Keys(global)), slices.Collect(maps.Keys(m)), "MembersAt %s", ch)
		are, err := store.AreMembers(ctx, app, ch, users)
		require.NoError(t, err)
		for i, u := range users {
			require.Equal(t, global[u], are[i], "AreMembers %s %s", ch, u)
		}
	}
}

// TestReadsExactWhileReaping holds a node's reap midway, two fields a
// slice, beside a live node sharing some channels and users with it: from
// the reap's first unit on, every read equals the live node's
// contribution, at every step between slices and after the last.
func TestReadsExactWhileReaping(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		live := loadNode(t, rdb, "app", "live", 3, 2, 4)
		dead := loadNode(t, rdb, "app", "dead", 6, 3, 5)
		// A user both nodes hold, who must stay while one node is reaped.
		for _, r := range []*Recorder{live, dead} {
			r.Add("app", "presence-0", 1)
			r.AddMember("app", "presence-0", "both", json.RawMessage(`{}`), 1)
			require.NoError(t, r.Flush(ctx))
		}
		chans := []string{"ch0", "ch1", "ch2", "ch3", "ch4", "ch5", "presence-0", "presence-1", "presence-2", "vacant"}
		users := []string{"u-live", "u-dead", "both", "nobody"}
		want := registeredSum(takeSnapshot(t, rdb, "app"))
		require.Equal(t, int64(9), want.conns)

		id, ok, reaped, err := store.startReap(ctx, "app", "dead", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		want = registeredSum(takeSnapshot(t, rdb, "app"))
		require.Equal(t, int64(4), want.conns, "only the live node is registered")
		for step := 0; ; step++ {
			checkReads(t, rdb, "app", want, chans)
			checkEdgeReads(t, rdb, "app", takeSnapshot(t, rdb, "app"), chans, users)
			fields := reapFields(t, rdb, "app", id, 2)
			if len(fields) == 0 {
				break
			}
			require.NoError(t, store.reapSlice(ctx, "app", id, fields, &reaped))
			s := takeSnapshot(t, rdb, "app")
			checkInvariants(t, s)
			require.Equal(t, want, registeredSum(s), "a slice changes no live contribution (step %d)", step)
		}
		s := takeSnapshot(t, rdb, "app")
		require.Equal(t, []string{"live"}, mapKeys(s.contrib), "the reap ran to its end")
		require.Equal(t, want.channels, s.global, "and the globals hold what the reads returned")
	})
}

// TestReadsCountARetire: a live node's republish moves its contribution
// aside as a reap too (a retire), which reads keep counting while its
// slices run, so counts read high during a republish, never low.
func TestReadsCountARetire(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		loadNode(t, rdb, "app", "a", 3, 2, 4)
		loadNode(t, rdb, "app", "b", 5, 3, 2)
		chans := []string{"ch0", "ch3", "ch4", "presence-0", "presence-2"}
		want := registeredSum(takeSnapshot(t, rdb, "app"))
		id, ok, reaped, err := store.startReap(ctx, "app", "b", -1, newEpoch(), "")
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, strings.HasPrefix(id, retirePrefix), id)
		for range 3 {
			checkReads(t, rdb, "app", want, chans)
			require.NoError(t, store.reapSlice(ctx, "app", id, reapFields(t, rdb, "app", id, 2), &reaped))
			want = registeredSum(takeSnapshot(t, rdb, "app"))
		}
		checkReads(t, rdb, "app", want, chans)
	})
}

// TestReadsLeaveOutTheRetireOfADeadNode: a node dies during its own
// republish, its retire's slices under way. From its reap's first unit
// (which unregisters it) reads leave out what the retire still holds too,
// while a live node's retire beside it stays counted.
func TestReadsLeaveOutTheRetireOfADeadNode(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		loadNode(t, rdb, "app", "a", 3, 2, 4)
		loadNode(t, rdb, "app", "b", 5, 3, 2)
		chans := []string{"ch0", "ch1", "ch3", "ch4", "presence-0", "presence-2"}
		retires := map[string]string{}
		for _, node := range []string{"a", "b"} {
			id, ok, reaped, err := store.startReap(ctx, "app", node, -1, newEpoch(), "")
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, store.reapSlice(ctx, "app", id, reapFields(t, rdb, "app", id, 2), &reaped))
			retires[node] = id
		}
		checkReads(t, rdb, "app", registeredSum(takeSnapshot(t, rdb, "app")), chans)
		_, ok, _, err := store.startReap(ctx, "app", "b", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		s := takeSnapshot(t, rdb, "app")
		want := registeredSum(s)
		require.NotEmpty(t, s.contrib["reaping:"+retires["b"]], "the dead node's retire is under way still")
		checkReads(t, rdb, "app", want, chans)
		for {
			fields := reapFields(t, rdb, "app", retires["b"], 2)
			if len(fields) == 0 {
				break
			}
			var r Reaped
			require.NoError(t, store.reapSlice(ctx, "app", retires["b"], fields, &r))
			require.Equal(t, want, registeredSum(takeSnapshot(t, rdb, "app")), "a slice changes no live contribution")
			checkReads(t, rdb, "app", want, chans)
		}
	})
}

// TestPropertyReadsExact drives random interleavings, one step at a time,
// of nodes' changes, reaps started and their slices (two fields each, in
// any order), a zombie's republish (a node reaped while alive writes
// again, under a new epoch, while its old contribution is still being
// reaped), and a second death during a reap (of another node, or of the
// zombie again); after every step every read equals the sum of the
// registered contributions at that moment, and invariants 1 and 2 hold.
func TestPropertyReadsExact(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { propertyReadsRun(t, rdb, seed) })
		}
	})
}

func propertyReadsRun(t *testing.T, rdb redis.UniversalClient, seed uint64) {
	const (
		nodes = 4
		steps = 120
	)
	ctx := context.Background()
	app := fmt.Sprintf("reads%d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	store := NewStore(rdb, testKeys.ks)
	recs := make([]*Recorder, nodes)
	for i := range recs {
		recs[i] = NewRecorder(rdb, fmt.Sprintf("node%d", i), RecorderOptions{Heartbeat: time.Hour, SliceSize: 2})
	}
	chans := []string{"ch0", "ch1", "ch2", "presence-0", "presence-1"}
	users := []string{"u0", "u1", "u2"}
	members := make([]map[string]int64, nodes) // per node: "channel\nuser" -> sockets, the model
	for i := range members {
		members[i] = map[string]int64{}
	}
	var reaps []string // ids this test started, maybe finished since
	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 5: // a node's change, flushed (republishing if it was reaped)
			i := rng.IntN(nodes)
			r := recs[i]
			ch := chans[rng.IntN(len(chans))]
			if strings.HasPrefix(ch, "presence-") {
				f := ch + "\n" + users[rng.IntN(len(users))]
				d := int64(1)
				if members[i][f] > 0 && rng.IntN(2) == 0 {
					d = -1
				}
				members[i][f] += d
				cu, u, _ := strings.Cut(f, "\n")
				r.Add(app, cu, d)
				r.AddMember(app, cu, u, json.RawMessage(`{}`), d)
			} else if n := r.Local(app)[ch]; n > 0 && rng.IntN(2) == 0 {
				r.Add(app, ch, -1)
			} else {
				r.Add(app, ch, 1)
			}
			if rng.IntN(3) == 0 {
				r.AddConnections(app, 1)
			}
			require.NoError(t, r.Flush(ctx))
		case op < 7: // a node dies (or is reaped while alive: a zombie)
			id, ok, _, err := store.startReap(ctx, app, fmt.Sprintf("node%d", rng.IntN(nodes)), 0, "", "")
			require.NoError(t, err)
			if ok && id != "" {
				reaps = append(reaps, id)
			}
		default: // a slice of some reap, fields in any order
			if len(reaps) == 0 {
				continue
			}
			id := reaps[rng.IntN(len(reaps))]
			fields := reapFields(t, rdb, app, id, 8)
			rng.Shuffle(len(fields), func(a, b int) { fields[a], fields[b] = fields[b], fields[a] })
			var r Reaped
			require.NoError(t, store.reapSlice(ctx, app, id, fields[:min(2, len(fields))], &r))
		}
		s := takeSnapshot(t, rdb, app)
		checkInvariants(t, s)
		checkReads(t, rdb, app, registeredSum(s), chans)
		if step%40 == 0 {
			t.Logf("step %d: %d contributions and reaps", step, len(s.contrib))
		}
	}
	_, err := store.FinishReaps(ctx, app)
	require.NoError(t, err)
	s := takeSnapshot(t, rdb, app)
	checkInvariants(t, s)
	want := registeredSum(s)
	checkReads(t, rdb, app, want, chans)
	require.Equal(t, want.channels, s.global, "once the reaps end the globals hold what the reads returned")
}

// TestLeaderboardLeavesAReapOut: a dead node holds the channels first by
// the global counts, one of them alone. From its reap's first unit the
// leaderboard's choice of entries, a channel's rank and a wsnode's channel
// load are those of the live node's counts; past the windows that bound
// their work (a reap holding more than topWindow of the first channels)
// the leaderboard comes short, never with a wrong entry, and the channel
// load is at least the truth.
func TestLeaderboardLeavesAReapOut(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		l := NewListings(rdb, ListingOptions{CacheTTL: -1})
		live, dead := newRecorder(t, rdb, "live"), newRecorder(t, rdb, "dead")
		for ch, n := range map[string]int64{"a": 2, "b": 1, "tie": 1} {
			live.Add("app", ch, n)
		}
		for ch, n := range map[string]int64{"big": 5, "a": 3, "z": 1} {
			dead.Add("app", ch, n)
		}
		require.NoError(t, live.Flush(ctx))
		require.NoError(t, dead.Flush(ctx))
		_, ok, _, err := store.startReap(ctx, "app", "dead", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)

		for limit, want := range map[int][]string{1: {"a"}, 2: {"a", "tie"}, 3: {"a", "tie", "b"}} {
			top, _, err := l.Top(ctx, "app", limit)
			require.NoError(t, err)
			require.Equal(t, want, names(top), "Top(%d)", limit)
		}
		for ch, rank := range map[string]int64{"a": 1, "tie": 2, "b": 3, "big": 0, "z": 0} {
			st, _, err := l.Channel(ctx, "app", ch, false, true)
			require.NoError(t, err)
			require.Equal(t, rank, st.Rank, "rank of %s", ch)
		}
		load, err := store.ChannelLoad(ctx, "app", "live", "big")
		require.NoError(t, err)
		require.Equal(t, ChannelLoad{Channels: 3, Nodes: 1}, load)

		// A second dead node holding more than the windows.
		huge := newRecorder(t, rdb, "huge")
		for i := range topWindow + 100 {
			huge.Add("app", fmt.Sprintf("h%04d", i), 10)
		}
		require.NoError(t, huge.Flush(ctx))
		_, ok, _, err = store.startReap(ctx, "app", "huge", 0, "", "")
		require.NoError(t, err)
		require.True(t, ok)
		top, _, err := l.Top(ctx, "app", 1)
		require.NoError(t, err)
		require.Empty(t, top, "past its window the leaderboard comes short")
		st, _, err := l.Channel(ctx, "app", "a", false, true)
		require.NoError(t, err)
		require.GreaterOrEqual(t, st.Rank, int64(1), "a rank past the window is never above the truth")
		load, err = store.ChannelLoad(ctx, "app", "live", "a")
		require.NoError(t, err)
		require.GreaterOrEqual(t, load.Channels, int64(3), "a channel load past the window is never below the truth")
		require.True(t, load.Occupied)
	})
}

func names(cs []ChannelCount) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// TestReadsDuringAReapDeclareItAtOnce: the first read after a reap starts
// finds it and runs again declaring it (two scripts); the reads after it
// declare it at once (one), until the reap ends, when the next read finds
// none again (two) and the rest run once, as before it began. For each of
// a Store's read, a Listings' and a read queued on a pipeline; the queued
// one shares the Store's memory of the reaps.
func TestReadsDuringAReapDeclareItAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	store := NewStore(rdb, testKeys.ks)
	l := NewListings(rdb, ListingOptions{Keyspace: testKeys.ks, CacheTTL: -1})
	loadNode(t, rdb, "app", "live", 3, 2, 4)
	loadNode(t, rdb, "app", "dead", 6, 3, 5)
	loadNode(t, rdb, "app", "dead2", 2, 1, 1)
	scripts := func() int {
		info, err := rdb.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		n := 0
		for line := range strings.Lines(info) {
			for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					calls, _, _ := strings.Cut(rest, ",")
					c, err := strconv.Atoi(calls)
					require.NoError(t, err)
					n += c
				}
			}
		}
		return n
	}
	reads := []func() error{
		func() error { _, err := store.Channel(ctx, "app", "ch0"); return err },
		func() error { _, _, err := l.Channel(ctx, "app", "ch0", false, false); return err },
		func() error {
			p := rdb.Pipeline()
			pc := store.QueueCounts(ctx, p, "app", "ch0", true)
			_, _ = p.Exec(ctx) // Result reads again what the pipeline could not answer
			_, _, err := pc.Result(ctx)
			return err
		},
	}
	read := func(what string) []int {
		var out []int
		for _, r := range reads {
			before := scripts()
			require.NoError(t, r(), what)
			out = append(out, scripts()-before)
		}
		return out
	}
	read("the scripts loaded")
	require.Equal(t, []int{1, 1, 1}, read("no reap: a script each"))

	id, ok, reaped, err := store.startReap(ctx, "app", "dead", 0, "", "")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []int{2, 2, 1}, read("the reap's first reads: found, then declared (the queued read after the Store's)"))
	require.Equal(t, []int{1, 1, 1}, read("reads during the reap declare it at once"))
	require.Equal(t, []int{1, 1, 1}, read("and the next"))

	require.NoError(t, store.drain(ctx, "app", id, &reaped))
	require.Equal(t, []int{2, 2, 1}, read("the first reads after the reap ended: declared, then none"))
	require.Equal(t, []int{1, 1, 1}, read("after it, as before"))

	// A queued read that is first to find a reap remembers it for the
	// Store's reads too.
	_, ok, _, err = store.startReap(ctx, "app", "dead2", 0, "", "")
	require.NoError(t, err)
	require.True(t, ok)
	before := scripts()
	require.NoError(t, reads[2]())
	require.Equal(t, 2, scripts()-before, "the queued read finds the reap")
	before = scripts()
	require.NoError(t, reads[0]())
	require.Equal(t, 1, scripts()-before, "the Store's read declares it at once")
}

// TestReadsOutlastAStormOfReaps: when many nodes die together (a zone, a
// node pool), their reaps start and end while the HTTP API reads; each
// read declares the reaps a script names and runs again, and it must get
// its answer however many reaps come and go meanwhile, not fail.
func TestReadsOutlastAStormOfReaps(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		const dead, reapers = 200, 8
		for i := range dead {
			r := newRecorder(t, rdb, fmt.Sprintf("dead%d", i))
			r.Add("app", "shared", 1)
			require.NoError(t, r.Flush(ctx))
		}
		live := newRecorder(t, rdb, "live")
		live.Add("app", "shared", 5)
		require.NoError(t, live.Flush(ctx))

		var reaps sync.WaitGroup
		t.Cleanup(reaps.Wait) // a failed read ends the test; the reapers end first
		for w := range reapers {
			reaps.Go(func() {
				for i := w; i < dead; i += reapers {
					_, _, err := store.RemoveNode(ctx, "app", fmt.Sprintf("dead%d", i))
					assert.NoError(t, err)
				}
			})
		}
		done := make(chan struct{})
		go func() { reaps.Wait(); close(done) }()
		for reads := 0; ; reads++ {
			finished := false
			select {
			case <-done:
				finished = true
			default:
			}
			all, err := store.Channels(ctx, "app", "")
			require.NoError(t, err, "read %d, while the reaps run", reads)
			if finished {
				require.Equal(t, map[string]int64{"shared": 5}, all, "the reaps done")
				return
			}
		}
	})
}

// TestExactlyGivesUpOnAReadThatNeverSettles: a read whose script names
// the same reap it was given, every time, is not a set that moves; it
// fails, after a number of tries bounded by the reaps named.
func TestExactlyGivesUpOnAReadThatNeverSettles(t *testing.T) {
	calls := 0
	_, err := Exactly(nil, func([]string) (any, error) {
		calls++
		return []any{int64(statusReaps), []any{"a"}}, nil
	})
	require.ErrorIs(t, err, errReapsMoving)
	require.Equal(t, 2*1+reapsRetrySlack+1, calls)
}
