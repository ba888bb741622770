package admission

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/logging"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var long = Rule{Capacity: 3, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}

func TestRuleFor(t *testing.T) {
	t.Parallel()
	app := &apps.App{Capacities: []apps.Capacity{{Prefix: "presence-", Capacity: 100}, {Prefix: "presence-room-", Capacity: 30}},
		Admission: apps.Admission{GraceSeconds: 5}}
	require.Equal(t, Rule{Capacity: 30, Members: DefaultMaxMembers, Ticket: DefaultTicket, Grace: 5 * time.Second, Dropout: DefaultDropout}, RuleFor(app, "presence-room-1"))
	require.Equal(t, 100, RuleFor(app, "presence-lobby").Capacity)
	require.Equal(t, 0, RuleFor(app, "private-x").Capacity)
	app.MaxPresenceMembersPerChannel = 7
	require.Equal(t, 7, RuleFor(app, "presence-lobby").Members)
}

// TestMemberLimit: the member limit is a capacity of every presence
// channel. Alone it seats first come first served, with no list: a user
// past it is refused (ErrFull), a member or a held user passes, and a seat
// frees when its holder is neither a member nor held. With a capacity, the
// channel seats the smaller of the two, through the list.
func TestMemberLimit(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, g := context.Background(), New(rdb, keyspace.Space{})
		complete(t, rdb, "app")
		r := Rule{Members: 2, Ticket: time.Hour, Grace: 300 * time.Millisecond, Dropout: time.Hour}
		for _, u := range []string{"a", "b", "a"} {
			ok, _, _, _, err := g.Join(ctx, "app", "presence-m", u, r)
			require.NoError(t, err, u)
			require.True(t, ok, u)
		}
		_, _, _, _, err := g.Join(ctx, "app", "presence-m", "c", r)
		require.ErrorIs(t, err, ErrFull)
		// No list: the admission API sees no limit, and c waits nowhere.
		res, err := g.Check(ctx, "app", "presence-m", "c", r)
		require.NoError(t, err)
		require.Equal(t, Unlimited, res.Status)
		st, _, err := g.State(ctx, "app", "presence-m", r)
		require.NoError(t, err)
		require.Equal(t, State{}, st)
		// a and b never became members: their seats free when the holds end.
		require.Eventually(t, func() bool {
			ok, _, _, _, err := g.Join(ctx, "app", "presence-m", "c", r)
			return err == nil && ok
		}, 5*time.Second, 20*time.Millisecond)

		// A capacity above the member limit seats the member limit.
		listed := r
		listed.Capacity = 5
		for i := range 3 {
			res, err := g.Check(ctx, "app", "presence-l", fmt.Sprint("u", i), listed)
			require.NoError(t, err)
			if i < 2 {
				require.Equal(t, Admitted, res.Status, i)
			} else {
				require.Equal(t, Waiting, res.Status)
				require.Equal(t, State{Capacity: 2, Occupancy: 2, Waiting: 1}, res.State)
			}
		}
		// A held user's key does not outlive the holds by much.
		ttl, err := rdb.PTTL(ctx, keys{}.channel("app", "presence-m").Hold).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, 2*r.Grace)
	})
}

// TestFIFO: first come first served below capacity, then a list in arrival
// order whose head takes the room a leaver makes.
func TestFIFO(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, g := context.Background(), New(rdb, keyspace.Space{})
		complete(t, rdb, "app")
		for i := range 10 {
			res, err := g.Check(ctx, "app", "presence-r", fmt.Sprint("u", i), long)
			require.NoError(t, err)
			if i < 3 {
				require.Equal(t, Admitted, res.Status, i)
				require.Equal(t, time.Hour, res.ExpiresIn.Round(time.Minute))
				continue
			}
			require.Equal(t, Waiting, res.Status, i)
			require.Equal(t, i-2, res.Position)
			require.Equal(t, State{Capacity: 3, Occupancy: 3, Waiting: i - 2}, res.State)
		}
		// A check-in keeps the place; an admitted user's check-in keeps the slot.
		res, err := g.Check(ctx, "app", "presence-r", "u5", long)
		require.NoError(t, err)
		require.Equal(t, 3, res.Position)
		res, err = g.Check(ctx, "app", "presence-r", "u1", long)
		require.NoError(t, err)
		require.Equal(t, Admitted, res.Status)

		st, ch, err := g.Leave(ctx, "app", "presence-r", "u1", long)
		require.NoError(t, err)
		require.Equal(t, []string{"u3"}, ch.Promoted)
		require.Equal(t, State{Capacity: 3, Occupancy: 3, Waiting: 6}, st)
		// A waiter leaving moves the ones behind up.
		_, _, err = g.Leave(ctx, "app", "presence-r", "u5", long)
		require.NoError(t, err)
		res, err = g.Check(ctx, "app", "presence-r", "u6", long)
		require.NoError(t, err)
		require.Equal(t, 2, res.Position) // u4, u6
		// Unlimited channels admit everyone.
		res, err = g.Check(ctx, "app", "presence-free", "x", Rule{})
		require.NoError(t, err)
		require.Equal(t, Unlimited, res.Status)
	})
}

// TestConcurrentCapacity: 1,000 users at once against capacity 30, each on
// its own connection: exactly 30 admitted, the rest on the list at distinct
// positions 1..970; then, as admitted users leave in random order, each
// leaver's room goes to the head of the list and nobody jumps the queue.
func TestConcurrentCapacity(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const users, capacity = 1000, 30
		r := Rule{Capacity: capacity, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
		gates := []*Gate{New(rdb, keyspace.Space{}), New(rdb, keyspace.Space{}), New(rdb, keyspace.Space{})}
		results := make([]Result, users)
		var wg sync.WaitGroup
		for i := range users {
			wg.Go(func() {
				var err error
				results[i], err = gates[i%3].Check(ctx, "app", "presence-room", fmt.Sprint("u", i), r)
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		var admitted []string
		byPosition := make([]string, users-capacity+1)
		for i, res := range results {
			switch res.Status {
			case Admitted:
				admitted = append(admitted, fmt.Sprint("u", i))
			case Waiting:
				require.Empty(t, byPosition[res.Position], "position %d given twice", res.Position)
				byPosition[res.Position] = fmt.Sprint("u", i)
			}
		}
		require.Len(t, admitted, capacity)
		for p := 1; p < len(byPosition); p++ {
			require.NotEmpty(t, byPosition[p], "position %d given to nobody", p)
		}
		next := 1
		for _, u := range admitted {
			st, ch, err := gates[next%3].Leave(ctx, "app", "presence-room", u, r)
			require.NoError(t, err)
			require.Equal(t, []string{byPosition[next]}, ch.Promoted, "the head of the list is admitted")
			require.Equal(t, capacity, st.Occupancy)
			next++
		}
	})
}

// TestDropout: a waiter who stops checking in is struck; one who checks in
// keeps the place.
func TestDropout(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx, g := context.Background(), New(rdb, keyspace.Space{})
	complete(t, rdb, "app")
	r := Rule{Capacity: 1, Ticket: time.Hour, Grace: time.Hour, Dropout: 300 * time.Millisecond}
	for _, u := range []string{"in", "silent", "faithful"} {
		_, err := g.Check(ctx, "app", "presence-r", u, r)
		require.NoError(t, err)
	}
	var last Result
	eventually(t, "the silent waiter is struck", func() bool {
		var err error
		last, err = g.Check(ctx, "app", "presence-r", "faithful", r)
		require.NoError(t, err)
		return last.Position == 1
	})
	require.Equal(t, 1, last.Waiting)
	require.Equal(t, []string{"silent"}, last.Dropped)
}

// TestGrace: a member keeps the slot past the ticket's expiry; a member who
// leaves keeps it for the grace (and comes back as a re-entry), after which
// it goes to the head of the list.
func TestGrace(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, g := context.Background(), New(rdb, keyspace.Space{})
		complete(t, rdb, "app")
		rec := counts.NewRecorder(rdb, "n1", counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
		member := func(u string, delta int64) {
			rec.AddMember("app", "presence-r", u, []byte(`{}`), delta)
			require.NoError(t, rec.Flush(ctx))
		}
		r := Rule{Capacity: 1, Ticket: 200 * time.Millisecond, Grace: 400 * time.Millisecond, Dropout: time.Hour}
		res, err := g.Check(ctx, "app", "presence-r", "alice", r)
		require.NoError(t, err)
		require.Equal(t, Admitted, res.Status)
		ok, _, _, _, err := g.Join(ctx, "app", "presence-r", "alice", r)
		require.NoError(t, err)
		require.True(t, ok)
		member("alice", 1)
		res, err = g.Check(ctx, "app", "presence-r", "bob", r)
		require.NoError(t, err)
		require.Equal(t, Waiting, res.Status)
		ok, _, pos, waiting, err := g.Join(ctx, "app", "presence-r", "bob", r)
		require.NoError(t, err)
		require.False(t, ok, "a waiter may not subscribe")
		require.Equal(t, []int{1, 1}, []int{pos, waiting})

		// Long past the ticket and the join's grace, alice is still in: she is a member.
		time.Sleep(3 * r.Grace) // the time passing is what is tested
		st, _, err := g.State(ctx, "app", "presence-r", r)
		require.NoError(t, err)
		require.Equal(t, State{Capacity: 1, Occupancy: 1, Waiting: 1}, st)

		// She leaves and comes back within the grace: a re-entry.
		member("alice", -1)
		kept, err := g.Left(ctx, "app", "presence-r", "alice", r)
		require.NoError(t, err)
		require.True(t, kept)
		ok, reentry, _, _, err := g.Join(ctx, "app", "presence-r", "alice", r)
		require.NoError(t, err)
		require.True(t, ok && reentry)
		member("alice", 1)

		// She leaves for good: after the grace, bob is admitted.
		member("alice", -1)
		_, err = g.Left(ctx, "app", "presence-r", "alice", r)
		require.NoError(t, err)
		st, _, err = g.State(ctx, "app", "presence-r", r)
		require.NoError(t, err)
		require.Equal(t, 1, st.Waiting, "bob waits while alice's grace lasts")
		var ch Changes
		eventually(t, "bob is admitted after alice's grace", func() bool {
			st, ch, err = g.State(ctx, "app", "presence-r", r)
			require.NoError(t, err)
			return st.Waiting == 0
		})
		require.Equal(t, []string{"bob"}, ch.Promoted)
		require.Equal(t, []string{"alice"}, ch.Freed)
		ok, _, _, _, err = g.Join(ctx, "app", "presence-r", "alice", r)
		require.NoError(t, err)
		require.False(t, ok, "after the grace the slot is gone")
	})
}

// TestCapacityOverride: raising the capacity admits the head at once;
// removing the override restores the apps file's rule; below 1 is refused.
func TestCapacityOverride(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx, g := context.Background(), New(rdb, keyspace.Space{})
	complete(t, rdb, "app")
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		_, err := g.Check(ctx, "app", "presence-r", u, long)
		require.NoError(t, err)
	}
	st, ch, err := g.SetCapacity(ctx, "app", "presence-r", 4, long)
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, ch.Promoted)
	require.Equal(t, State{Capacity: 4, Occupancy: 4, Waiting: 1}, st)
	st, _, err = g.ClearCapacity(ctx, "app", "presence-r", long)
	require.NoError(t, err)
	require.Equal(t, State{Capacity: 3, Occupancy: 4, Waiting: 1}, st, "lowering evicts nobody")
	_, _, err = g.SetCapacity(ctx, "app", "presence-r", 0, long)
	require.ErrorIs(t, err, ErrNoCapacity)
}

// TestCheckIn: a wsnode's check-in keeps its connected waiters on the list
// and tells each where they stand.
func TestCheckIn(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx, g := context.Background(), New(rdb, keyspace.Space{})
	complete(t, rdb, "app")
	r := Rule{Capacity: 1, Ticket: time.Hour, Grace: time.Hour, Dropout: 300 * time.Millisecond}
	for _, u := range []string{"a", "b", "c"} {
		_, err := g.Check(ctx, "app", "presence-r", u, r)
		require.NoError(t, err)
	}
	deadline := time.Now().Add(3 * r.Dropout)
	for time.Now().Before(deadline) {
		_, _, states, err := g.CheckIn(ctx, "app", "presence-r", []string{"a", "c", "nobody"}, r)
		require.NoError(t, err)
		require.True(t, states[0].Admitted)
		require.Zero(t, states[2].Position)
		if states[1].Position == 1 {
			break // b dropped out, c (connected) did not
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, _, states, err := g.CheckIn(ctx, "app", "presence-r", []string{"c"}, r)
	require.NoError(t, err)
	require.Equal(t, 1, states[0].Position)
	_, ch, states, err := g.CheckIn(ctx, "app", "presence-r", []string{"c"}, r)
	require.NoError(t, err)
	require.False(t, states[0].Admitted)
	require.True(t, slices.Equal(ch.Promoted, nil) || len(ch.Promoted) == 0)
}

// TestHolds: a subscribe the gate let in holds its seat until the node has
// recorded the member, whatever comes first: DELETE takes no seat from a
// user in the channel (a member, or one being recorded), a member joining
// on a second node keeps the seat while their other node's leave lands
// first, and a subscribe never recorded (its socket left before the flush)
// frees the seat after the grace.
func TestHolds(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, g := context.Background(), New(rdb, keyspace.Space{})
		complete(t, rdb, "app")
		r := Rule{Capacity: 2, Ticket: time.Hour, Grace: 300 * time.Millisecond, Dropout: time.Hour}
		const ch = "presence-r"
		recs := map[string]*counts.Recorder{}
		member := func(node, u string, delta int64) {
			t.Helper()
			if recs[node] == nil {
				recs[node] = counts.NewRecorder(rdb, node, counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
			}
			recs[node].AddMember("app", ch, u, []byte(`{}`), delta)
			require.NoError(t, recs[node].Flush(ctx))
		}
		join := func(u string) bool {
			t.Helper()
			ok, _, _, _, err := g.Join(ctx, "app", ch, u, r)
			require.NoError(t, err)
			return ok
		}
		check := func(u string) Result {
			t.Helper()
			res, err := g.Check(ctx, "app", ch, u, r)
			require.NoError(t, err)
			return res
		}
		state := func() State {
			t.Helper()
			st, _, err := g.State(ctx, "app", ch, r)
			require.NoError(t, err)
			return st
		}
		require.Equal(t, Admitted, check("alice").Status)
		require.Equal(t, Admitted, check("bob").Status)
		require.Equal(t, Waiting, check("carol").Status)

		// alice subscribes; before her node records her, the app gives up
		// her seat. It stays hers: carol waits on.
		require.True(t, join("alice"))
		st, ch1, err := g.Leave(ctx, "app", ch, "alice", r)
		require.NoError(t, err)
		require.Empty(t, ch1.Promoted)
		require.Equal(t, State{Capacity: 2, Occupancy: 2, Waiting: 1}, st)
		require.True(t, join("alice"), "a second socket of a user being recorded is let in")
		member("n1", "alice", 1)
		time.Sleep(2 * r.Grace) // the hold ends; membership holds the seat now
		require.Equal(t, State{Capacity: 2, Occupancy: 2, Waiting: 1}, state())

		// bob is a member on n1 and subscribes on n2 too; n1's leave lands
		// before n2's flush: bob is held, carol waits on.
		require.True(t, join("bob"))
		member("n1", "bob", 1)
		require.True(t, join("bob"))
		member("n1", "bob", -1)
		_, err = g.Left(ctx, "app", ch, "bob", r)
		require.NoError(t, err)
		_, _, err = g.Leave(ctx, "app", ch, "bob", r) // and gives up his grace
		require.NoError(t, err)
		require.Equal(t, State{Capacity: 2, Occupancy: 2, Waiting: 1}, state())
		member("n2", "bob", 1)
		require.Equal(t, State{Capacity: 2, Occupancy: 2, Waiting: 1}, state())

		// alice, who gave up her slot, leaves: no grace; carol gets the seat.
		member("n1", "alice", -1)
		kept, err := g.Left(ctx, "app", ch, "alice", r)
		require.NoError(t, err)
		require.False(t, kept)
		st, c, err := g.State(ctx, "app", ch, r)
		require.NoError(t, err)
		require.Equal(t, []string{"carol"}, c.Promoted)
		require.Equal(t, State{Capacity: 2, Occupancy: 2, Waiting: 0}, st)

		// bob leaves too: without a slot, no grace, but the hold of his
		// last subscribe keeps the seat until it ends; then dave gets it.
		member("n2", "bob", -1)
		kept, err = g.Left(ctx, "app", ch, "bob", r)
		require.NoError(t, err)
		require.False(t, kept)
		require.Equal(t, Waiting, check("dave").Status)
		eventually(t, "bob's hold ends", func() bool { return state().Waiting == 0 })
		require.Equal(t, Admitted, check("dave").Status)
		require.False(t, join("bob"), "bob holds no seat any more")

		// dave subscribes, gives up his seat, and his socket leaves before
		// his node records anything: the seat frees when the hold ends.
		require.True(t, join("dave"))
		_, _, err = g.Leave(ctx, "app", ch, "dave", r)
		require.NoError(t, err)
		require.Equal(t, Waiting, check("erin").Status)
		eventually(t, "dave's hold ends", func() bool { return state().Waiting == 0 })
		require.Equal(t, Admitted, check("erin").Status)
		require.False(t, join("dave"))
	})
}

// complete marks app's counts complete, as the nodes' first registration
// in a Redis does once it has settled (counts.CompleteKey): these tests
// have no node, and Join seats nobody new before it.
func complete(t testing.TB, rdb redis.UniversalClient, app string) {
	t.Helper()
	require.NoError(t, rdb.Set(context.Background(), counts.CompleteKey(keyspace.Space{}, app), "0", 0).Err())
}

// TestDeadNodesMembersHoldNoSeat: a member whose sockets are all on a node
// known dead holds no seat from the reap's first unit on, however long
// the reap takes (here it is left whole: its cleaner stopped at the first
// slice), as every read of counts leaves the node out.
func TestDeadNodesMembersHoldNoSeat(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, g := context.Background(), New(rdb, keyspace.Space{})
		for node, user := range map[string]string{"dead": "a", "live": "b"} {
			rec := counts.NewRecorder(rdb, node, counts.RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t)})
			rec.Add("app", "presence-m", 1)
			rec.AddMember("app", "presence-m", user, nil, 1)
			require.NoError(t, rec.Flush(ctx))
		}
		complete(t, rdb, "app")
		r := Rule{Members: 2, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
		_, _, _, _, err := g.Join(ctx, "app", "presence-m", "c", r)
		require.ErrorIs(t, err, ErrFull)

		// The cleaner stops right after the reap's first unit: its first
		// slice asks what to log, and that cancels it.
		reapCtx, stop := context.WithCancel(ctx)
		store := counts.NewStore(rdb, keyspace.Space{})
		store.LogEvents = func(string) eventlog.Spec { stop(); return eventlog.Spec{} }
		_, _, err = store.ReapNode(reapCtx, "app", "dead", 0)
		require.ErrorIs(t, err, context.Canceled)
		n, err := store.Nodes(ctx, "app", 0)
		require.NoError(t, err)
		require.Equal(t, 1, n.Reaping, "the reap is left whole")

		listed := r
		listed.Capacity = 2
		st, _, err := g.State(ctx, "app", "presence-m", listed)
		require.NoError(t, err)
		require.Equal(t, 1, st.Occupancy, "only b holds a seat")
		ok, _, _, _, err := g.Join(ctx, "app", "presence-m", "c", r)
		require.NoError(t, err)
		require.True(t, ok, "a's seat is free")
		left, err := g.Left(ctx, "app", "presence-m", "a", listed)
		require.NoError(t, err)
		require.False(t, left)
	})
}
