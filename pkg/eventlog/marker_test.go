package eventlog

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/luascript"
)

// markScript logs one marker as the count scripts do (log_mark), held to
// ARGV[2] bytes: ARGV[3] the event's name, ARGV[4] channel, ARGV[5] user.
var markScript = redis.NewScript(luascript.NowMs.Src + Prelude.Src + `
local h = log_open(KEYS[1], ARGV[1], ARGV[2])
local user = ARGV[5]
if user == '' then user = nil end
log_mark(h, string.format('%d', now_ms()), ARGV[3], ARGV[4], user)
return h.bytes`)

// testCounts stands for the app's channel counts and a member hash, which
// package counts writes in production.
const testCounts, testMembers = "test:{app}:channels", "test:{app}:members:presence-p"

func mark(t *testing.T, rdb redis.UniversalClient, budget int64, name, ch, user string) {
	t.Helper()
	require.NoError(t, markScript.Run(context.Background(), rdb, []string{testLog.Key, testLog.Index}, MaxEntries, budget, name, ch, user).Err())
}

// entry is one entry of the test log, decoded.
type entry struct {
	ID, Kind string
	Ev       map[string]any
}

func entries(t *testing.T, rdb redis.UniversalClient) []entry {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), testLog.Key, "-", "+").Result()
	require.NoError(t, err)
	out := make([]entry, len(msgs))
	for i, m := range msgs {
		out[i].ID = m.ID
		out[i].Kind, _ = m.Values["k"].(string)
		raw, _ := m.Values["ev"].(string)
		require.NoError(t, json.Unmarshal([]byte(raw), &out[i].Ev), raw)
	}
	return out
}

func claim(t *testing.T, rdb redis.UniversalClient, ms ...Marker) []string {
	t.Helper()
	got, err := testLog.Claim(context.Background(), rdb, 0, testCounts, ms)
	require.NoError(t, err)
	return got
}

func markerOf(e entry) Marker {
	m := Marker{ID: e.ID, Kind: e.Kind[0], Name: e.Ev["name"].(string), Channel: e.Ev["channel"].(string)}
	if u, ok := e.Ev["user_id"].(string); ok {
		m.UserID, m.Members = u, testMembers
	}
	return m
}

// TestMarkersCoalesce: while a channel's marker is unclaimed, its further
// changes log nothing, and the claim tells the state they left: a change
// undone is not posted, a count is the count at the claim. Once claimed,
// the next change logs a new marker.
func TestMarkersCoalesce(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		// occupied, vacated, occupied, vacated, ... of "blip", and its
		// counts: one marker of each kind.
		for range 50 {
			mark(t, rdb, 0, ChannelOccupied, "blip", "")
			mark(t, rdb, 0, SubscriptionCount, "blip", "")
			mark(t, rdb, 0, ChannelVacated, "blip", "")
		}
		es := entries(t, rdb)
		require.Len(t, es, 2, "one occupancy marker and one count marker")
		require.Equal(t, "o", es[0].Kind)
		require.Equal(t, ChannelOccupied, es[0].Ev["name"])
		require.Equal(t, "s", es[1].Kind)
		require.Nil(t, es[1].Ev["subscription_count"], "a count marker carries no count: the claim reads it")

		// The channel ends vacated: its occupied is undone, its count 0.
		require.Equal(t, []string{ClaimUndone, "0"}, claim(t, rdb, markerOf(es[0]), markerOf(es[1])))

		// Occupied again, by 3: new markers, which post the change.
		require.NoError(t, rdb.ZAdd(ctx, testCounts, redis.Z{Member: "blip", Score: 3}).Err())
		mark(t, rdb, 0, ChannelOccupied, "blip", "")
		mark(t, rdb, 0, SubscriptionCount, "blip", "")
		es = entries(t, rdb)
		require.Len(t, es, 4)
		require.Equal(t, []string{ClaimPost, "3"}, claim(t, rdb, markerOf(es[2]), markerOf(es[3])))
		// A second claim of the same marker (another webhook) reads the
		// state again.
		require.NoError(t, rdb.ZAdd(ctx, testCounts, redis.Z{Member: "blip", Score: 5}).Err())
		require.Equal(t, []string{"5"}, claim(t, rdb, markerOf(es[3])))

		// Members: one marker per member while unclaimed.
		for range 10 {
			mark(t, rdb, 0, MemberAdded, "presence-p", "u1")
			mark(t, rdb, 0, MemberRemoved, "presence-p", "u1")
		}
		es = entries(t, rdb)
		require.Len(t, es, 5)
		require.Equal(t, []string{ClaimUndone}, claim(t, rdb, markerOf(es[4])), "u1 is not a member: the add was undone")
	})
}

// TestClaimDefersBehindOccupancy: a member or count marker whose channel
// was occupied again after it, with that channel_occupied not claimed yet,
// is not posted before it (after the channel_vacated posted meanwhile): it
// is logged again after it. A channel_vacated logged after a member's
// leave in the same unit does not defer the leave, which goes first.
func TestClaimDefersBehindOccupancy(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const ch = "presence-p"
		join := func() {
			require.NoError(t, rdb.ZAdd(ctx, testCounts, redis.Z{Member: ch, Score: 1}).Err())
			require.NoError(t, rdb.HSet(ctx, testMembers, "u1", 1).Err())
			mark(t, rdb, 0, ChannelOccupied, ch, "")
			mark(t, rdb, 0, MemberAdded, ch, "u1")
		}
		leave := func() {
			require.NoError(t, rdb.ZRem(ctx, testCounts, ch).Err())
			require.NoError(t, rdb.HDel(ctx, testMembers, "u1").Err())
			mark(t, rdb, 0, MemberRemoved, ch, "u1")
			mark(t, rdb, 0, ChannelVacated, ch, "")
		}
		join()
		es := entries(t, rdb)
		require.Equal(t, []string{ClaimPost, ClaimPost}, claim(t, rdb, markerOf(es[0]), markerOf(es[1])))
		// u1 leaves: the leave and the vacated, in that order.
		leave()
		es = entries(t, rdb)
		require.Len(t, es, 4)
		require.Equal(t, []string{ClaimPost, ClaimPost}, claim(t, rdb, markerOf(es[2]), markerOf(es[3])),
			"the leave goes before the vacated logged after it")

		// u1 comes back (a new occupancy marker and member marker), leaves
		// and comes back before anything is claimed, then leaves again.
		join()
		leave()
		es = entries(t, rdb)
		require.Len(t, es, 6)
		// Its channel_occupied is claimed: undone, the channel is vacated.
		require.Equal(t, []string{ClaimUndone}, claim(t, rdb, markerOf(es[4])))
		// u1 comes back once more: a new channel_occupied after u1's
		// unclaimed marker.
		join()
		es = entries(t, rdb)
		require.Len(t, es, 7)
		require.Equal(t, ChannelOccupied, es[6].Ev["name"])
		// u1's marker says u1 is a member now, which must follow that
		// channel_occupied: it is logged again after it.
		require.Equal(t, []string{ClaimDeferred}, claim(t, rdb, markerOf(es[5])))
		es = entries(t, rdb)
		require.Len(t, es, 8)
		require.Equal(t, MemberAdded, es[7].Ev["name"])
		require.Equal(t, "u1", es[7].Ev["user_id"])
		// Deferring it again (another webhook reaching the first marker)
		// logs nothing more: a later marker of u1 follows the occupied.
		require.Equal(t, []string{ClaimDeferred}, claim(t, rdb, markerOf(es[5])))
		require.Len(t, entries(t, rdb), 8)
		require.Equal(t, []string{ClaimPost, ClaimPost}, claim(t, rdb, markerOf(es[6]), markerOf(es[7])))
	})
}

// TestBudgetRefusesAndNotices: every event is held to the budget, markers
// included; refusals are counted, and the first event let in afterwards
// is preceded by an events_dropped notice saying how many went missing
// since when.
func TestBudgetRefusesAndNotices(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const budget = 1000
		var refused int
		for i := range 20 {
			n, bytes, err := testLog.Append(ctx, rdb, budget, clientEvent(i, 100))
			require.NoError(t, err)
			require.LessOrEqual(t, bytes, int64(budget))
			refused += n
		}
		for _, ch := range []string{"a", "b", "c"} {
			mark(t, rdb, budget, ChannelOccupied, ch, "")
		}
		require.LessOrEqual(t, requireBytes(t, rdb), int64(budget))
		st, err := testLog.Stats(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, int64(refused+3), st.Dropped)
		require.Equal(t, st.Dropped, st.Untold)
		require.False(t, st.UntoldSince.IsZero())

		// Room again (a trim): a notice, then the event.
		require.NoError(t, rdb.XTrimMaxLen(ctx, testLog.Key, 0).Err())
		mark(t, rdb, budget, ChannelOccupied, "a", "")
		es := entries(t, rdb)
		require.Len(t, es, 2)
		require.Equal(t, EventsDropped, es[0].Ev["name"])
		require.Equal(t, float64(refused+3), es[0].Ev["dropped"])
		require.InDelta(t, float64(st.UntoldSince.UnixMilli()), es[0].Ev["since_ms"], 0)
		require.Equal(t, "", es[0].Ev["channel"])
		require.Equal(t, ChannelOccupied, es[1].Ev["name"])
		st, err = testLog.Stats(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, int64(refused+3), st.Dropped)
		require.Zero(t, st.Untold, "told")
	})
}

// TestSweepForgetsTrimmedMarkers: a marker trimmed before any deliverer
// claimed it leaves no slot behind for long, and no longer holds back its
// channel's next change.
func TestSweepForgetsTrimmedMarkers(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		for i := range 30 {
			mark(t, rdb, 0, ChannelOccupied, string(rune('a'+i%26))+"x"+string(rune('a'+i/26)), "")
		}
		require.NoError(t, rdb.XTrimMaxLen(ctx, testLog.Key, 0).Err())
		mark(t, rdb, 0, ChannelOccupied, "axa", "")
		require.Len(t, entries(t, rdb), 1, "a trimmed marker holds nothing back")
		var cursor uint64
		for {
			var err error
			cursor, err = testLog.Sweep(ctx, rdb, cursor, 7)
			require.NoError(t, err)
			if cursor == 0 {
				break
			}
		}
		slots, err := rdb.HGetAll(ctx, testLog.Index).Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"o\naxa": entries(t, rdb)[0].ID}, slots)
	})
}

// TestTellWithNoEventAfter: drops after which no event comes are told all
// the same once the log has room (the deliverers call Tell), and only
// then.
func TestTellWithNoEventAfter(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const budget = 300
		for i := range 5 {
			_, _, err := testLog.Append(ctx, rdb, budget, clientEvent(i, 100))
			require.NoError(t, err)
		}
		told, err := testLog.Tell(ctx, rdb, budget)
		require.NoError(t, err)
		require.False(t, told, "no room yet")
		require.Len(t, entries(t, rdb), 2)
		require.NoError(t, rdb.XTrimMaxLen(ctx, testLog.Key, 0).Err())
		told, err = testLog.Tell(ctx, rdb, budget)
		require.NoError(t, err)
		require.True(t, told)
		es := entries(t, rdb)
		require.Len(t, es, 1)
		require.Equal(t, EventsDropped, es[0].Ev["name"])
		require.Equal(t, 3.0, es[0].Ev["dropped"])
		told, err = testLog.Tell(ctx, rdb, budget)
		require.NoError(t, err)
		require.False(t, told, "told once")
	})
}
