package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestLists: every gated channel of the app (waiters, admitted users or an
// override), longest list first, settled as GET .../admission settles;
// other apps' channels and channels without a capacity stay out, and so
// do channels with the member limit alone, whose joins hold seats.
func TestLists(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx, g := context.Background(), New(rdb, keyspace.Space{})
		complete(t, rdb, "app")
		const app = "app*[x]" // glob characters are matched literally
		complete(t, rdb, app)
		rules := map[string]Rule{
			"presence-busy": {Capacity: 1, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour},
			"presence-calm": {Capacity: 2, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour},
			// Long enough that the first listing below comes before it ends,
			// which 300 ms was not on a loaded machine's Cluster.
			"presence-brief": {Capacity: 1, Ticket: 2 * time.Second, Grace: time.Hour, Dropout: time.Hour},
		}
		rule := func(ch string) Rule { return rules[ch] }
		got, err := g.Lists(ctx, app, 10, rule)
		require.NoError(t, err)
		require.Empty(t, got)

		check := func(app, ch, user string, r Rule) {
			t.Helper()
			_, err := g.Check(ctx, app, ch, user, r)
			require.NoError(t, err)
		}
		for i := range 4 {
			check(app, "presence-busy", fmt.Sprint("b", i), rules["presence-busy"])
		}
		check(app, "presence-calm", "c0", rules["presence-calm"])
		check(app, "presence-brief", "t0", rules["presence-brief"])
		check(app, "presence-brief", "t1", rules["presence-brief"])
		check("appx", "presence-busy", "other", rules["presence-busy"]) // another app
		_, _, err = g.SetCapacity(ctx, app, "presence-set", 5, Rule{})
		require.NoError(t, err)
		rules["presence-set"] = Rule{Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
		rules["presence-members"] = Rule{Members: 100, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
		ok, _, _, _, err := g.Join(ctx, app, "presence-members", "m0", rules["presence-members"])
		require.NoError(t, err)
		require.True(t, ok)
		gated, err := g.gatedChannels(ctx, app)
		require.NoError(t, err)
		require.NotContains(t, gated, "presence-members")

		got, err = g.Lists(ctx, app, 10, rule)
		require.NoError(t, err)
		require.Equal(t, []ChannelState{
			{Channel: "presence-busy", State: State{Capacity: 1, Occupancy: 1, Waiting: 3}, Changes: Changes{Promoted: []string{}, Dropped: []string{}, Freed: []string{}}},
			{Channel: "presence-brief", State: State{Capacity: 1, Occupancy: 1, Waiting: 1}, Changes: Changes{Promoted: []string{}, Dropped: []string{}, Freed: []string{}}},
			{Channel: "presence-calm", State: State{Capacity: 2, Occupancy: 1, Waiting: 0}, Changes: Changes{Promoted: []string{}, Dropped: []string{}, Freed: []string{}}},
			{Channel: "presence-set", State: State{Capacity: 5, Occupancy: 0, Waiting: 0}, Changes: Changes{Promoted: []string{}, Dropped: []string{}, Freed: []string{}}},
		}, got)

		got, err = g.Lists(ctx, app, 2, rule)
		require.NoError(t, err)
		require.Len(t, got, 2, "the limit applies")
		require.Equal(t, "presence-busy", got[0].Channel)

		// t0's ticket runs out unused: the listing settles the gate like GET
		// .../admission does and reports what it changed.
		var brief ChannelState
		deadline := time.Now().Add(10 * time.Second)
		for len(brief.Freed) == 0 {
			require.False(t, time.Now().After(deadline), "t0's ticket never expired: %+v", brief)
			time.Sleep(50 * time.Millisecond)
			got, err = g.Lists(ctx, app, 10, rule)
			require.NoError(t, err)
			for _, c := range got {
				if c.Channel == "presence-brief" {
					brief = c
				}
			}
		}
		require.Equal(t, []string{"t0"}, brief.Freed)
		require.Equal(t, []string{"t1"}, brief.Promoted)
		require.Equal(t, State{Capacity: 1, Occupancy: 1, Waiting: 0}, brief.State)

		// A channel whose rule no longer limits it is left out.
		_, _, err = g.ClearCapacity(ctx, app, "presence-set", Rule{})
		require.NoError(t, err)
		delete(rules, "presence-calm")
		got, err = g.Lists(ctx, app, 10, rule)
		require.NoError(t, err)
		var names []string
		for _, c := range got {
			names = append(names, c.Channel)
		}
		require.Equal(t, "presence-busy,presence-brief", strings.Join(names, ","))
	})
}

// TestMaxCapacity: the largest capacity reads back exact, in the state and
// in the listing, through Redis's integer replies; a larger one is refused,
// and an override written before there was a maximum counts as the
// maximum instead of coming back negative and leaving the listing.
func TestMaxCapacity(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx, g := context.Background(), New(rdb, keyspace.Space{})
	complete(t, rdb, "app")
	r := Rule{Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour}
	st, _, err := g.SetCapacity(ctx, "app", "presence-max", apps.MaxCapacity, r)
	require.NoError(t, err)
	require.Equal(t, apps.MaxCapacity, st.Capacity)
	_, _, err = g.SetCapacity(ctx, "app", "presence-max", apps.MaxCapacity+1, r)
	require.ErrorIs(t, err, ErrNoCapacity)

	// As PUT .../capacity could write it before the maximum.
	require.NoError(t, rdb.Set(ctx, g.keys.channel("app", "presence-old").Cap, "9223372036854775807", 0).Err())
	res, err := g.Check(ctx, "app", "presence-old", "u", r)
	require.NoError(t, err)
	require.Equal(t, Admitted, res.Status)
	require.Equal(t, State{Capacity: apps.MaxCapacity, Occupancy: 1}, res.State)
	got, err := g.Lists(ctx, "app", 10, func(string) Rule { return r })
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, c := range got {
		require.Equal(t, apps.MaxCapacity, c.Capacity, c.Channel)
	}

	// The apps file's rule is refused above it at load (package apps); at
	// the maximum it reads back exact.
	res, err = g.Check(ctx, "app", "presence-rule", "u", Rule{Capacity: apps.MaxCapacity, Ticket: time.Hour, Grace: time.Hour, Dropout: time.Hour})
	require.NoError(t, err)
	require.Equal(t, apps.MaxCapacity, res.Capacity)
}
