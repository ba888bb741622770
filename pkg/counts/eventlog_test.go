package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/logging"
)

// eventLog reads app's event log as "name channel [user]" lines.
func eventLog(t *testing.T, rdb redis.UniversalClient, app string) []string {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), eventlog.Key(testKeys.ks, app), "-", "+").Result()
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		var ev struct {
			Name    string `json:"name"`
			Channel string `json:"channel"`
			UserID  string `json:"user_id"`
		}
		raw, _ := e.Values["ev"].(string)
		require.NoError(t, json.Unmarshal([]byte(raw), &ev), raw)
		line := ev.Name + " " + ev.Channel
		if ev.UserID != "" {
			line += " " + ev.UserID
		}
		out = append(out, line)
	}
	return out
}

// logAll is a Spec that logs every marker event, unbounded.
var logAll = eventlog.Spec{Names: []string{eventlog.ChannelOccupied, eventlog.ChannelVacated,
	eventlog.MemberAdded, eventlog.MemberRemoved, eventlog.SubscriptionCount}}

// claimAll claims every marker of app's log, as a deliverer does before
// posting, and returns what each claim said, by line as eventLog has it.
func claimAll(t *testing.T, rdb redis.UniversalClient, app string) map[string]string {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), eventlog.Key(testKeys.ks, app), "-", "+").Result()
	require.NoError(t, err)
	var ms []eventlog.Marker
	var lines []string
	for i, e := range entries {
		k, _ := e.Values["k"].(string)
		if k == "" {
			continue
		}
		var ev struct {
			Name    string `json:"name"`
			Channel string `json:"channel"`
			UserID  string `json:"user_id"`
		}
		raw, _ := e.Values["ev"].(string)
		require.NoError(t, json.Unmarshal([]byte(raw), &ev))
		m := eventlog.Marker{ID: e.ID, Kind: k[0], Name: ev.Name, Channel: ev.Channel, UserID: ev.UserID}
		if ev.UserID != "" {
			m.Members = MembersKey(testKeys.ks, app, ev.Channel)
		}
		ms = append(ms, m)
		lines = append(lines, eventLog(t, rdb, app)[i])
	}
	got, err := eventlog.For(testKeys.ks, app).Claim(context.Background(), rdb, 0, ChannelsKey(testKeys.ks, app), ms)
	require.NoError(t, err)
	out := map[string]string{}
	for i, l := range lines {
		out[l] = got[i]
	}
	return out
}

// TestEventLog: with LogEvents, the count scripts log exactly the edges
// they make to the app's event log as markers, in the same unit: a channel
// occupied then vacated, a member's first socket and last, on any node; a
// reaped node's channels and members; the counts of channels that are not
// presence channels; nothing for apps without a log. While a marker is
// unclaimed, later changes of the same state log nothing; a claim reads
// the state they left.
func TestEventLog(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		logs := func(app string) eventlog.Spec {
			if app == "app" {
				return logAll
			}
			return eventlog.Spec{}
		}
		rec := func(node string) *Recorder {
			return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t), LogEvents: logs})
		}
		n1, n2 := rec("n1"), rec("n2")
		flush := func(r *Recorder) { require.NoError(t, r.Flush(ctx)) }

		n1.Add("app", "news", 1)
		n1.Add("other", "news", 1)
		flush(n1)
		n2.Add("app", "news", 1) // no edge: already occupied; its count marker is pending
		n2.Add("app", "presence-r", 1)
		n2.AddMember("app", "presence-r", "u1", []byte(`{}`), 1)
		flush(n2)
		n1.Add("app", "presence-r", 1)
		n1.AddMember("app", "presence-r", "u1", []byte(`{}`), 1) // u1's second socket: no edge
		n1.Add("app", "news", -1)
		flush(n1)
		require.Equal(t, []string{
			"channel_occupied news",
			"subscription_count news",
			"channel_occupied presence-r",
			"member_added presence-r u1",
		}, eventLog(t, rdb, "app"))
		require.Equal(t, map[string]string{
			"channel_occupied news":       eventlog.ClaimPost,
			"subscription_count news":     "1",
			"channel_occupied presence-r": eventlog.ClaimPost,
			"member_added presence-r u1":  eventlog.ClaimPost,
		}, claimAll(t, rdb, "app"))

		// n2 dies: reaping it removes news's last subscriber; u1 still has n1.
		s := NewStore(rdb, testKeys.ks)
		s.LogEvents = logs
		ok, _, err := s.ReapNode(ctx, "app", "n2", 0)
		require.NoError(t, err)
		require.True(t, ok)
		n1.Add("app", "presence-r", -1)
		n1.AddMember("app", "presence-r", "u1", nil, -1)
		flush(n1)
		require.Equal(t, []string{
			"channel_vacated news",
			"member_removed presence-r u1",
			"channel_vacated presence-r",
		}, eventLog(t, rdb, "app")[4:])
		require.Empty(t, eventLog(t, rdb, "other"))

		// news comes back, goes and comes back before anyone claims: one
		// marker, whose claim finds the vacated undone.
		for range 3 {
			n1.Add("app", "news", 1)
			flush(n1)
			n1.Add("app", "news", -1)
			flush(n1)
		}
		n1.Add("app", "news", 1)
		flush(n1)
		require.Equal(t, []string{"subscription_count news"}, eventLog(t, rdb, "app")[7:],
			"only the count: the vacated marker is unclaimed")
		got := claimAll(t, rdb, "app")
		require.Equal(t, eventlog.ClaimUndone, got["channel_vacated news"], "news is occupied again")
		require.Equal(t, "1", got["subscription_count news"])
	})
}

// TestUndeclaredFieldsRetry: every key a count script touches must be in
// KEYS (Redis Cluster moves keys under a script that does not declare
// them). A replace that meets old fields its caller did not know about
// (a presence member the local truth no longer has) writes nothing, names
// them, and the recorder's next replace declares them: the contribution
// ends exact and the audit clean.
func TestUndeclaredFieldsRetry(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		before := newRecorder(t, rdb, "n1")
		before.Add("app", "presence-x", 1)
		before.AddMember("app", "presence-x", "u1", []byte(`{}`), 1)
		require.NoError(t, before.Flush(ctx))

		// The same node id with another local truth: its first flush is a
		// replace whose old contribution holds presence-x, unknown to it.
		after := newRecorder(t, rdb, "n1")
		after.Add("app", "news", 1)
		require.NoError(t, after.Flush(ctx))
		s := NewStore(rdb, testKeys.ks)
		n, err := s.Channel(ctx, "app", "news")
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		n, err = s.Channel(ctx, "app", "presence-x")
		require.NoError(t, err)
		require.Zero(t, n)
		users, err := s.UserCount(ctx, "app", "presence-x")
		require.NoError(t, err)
		require.Zero(t, users)
		report, err := s.Audit(ctx, "app")
		require.NoError(t, err)
		require.False(t, report.Found(), "%+v", report)
	})
}

// logSize sums what app's event log holds as the byte budget counts it
// (each entry's "t" and "ev"), read entry by entry: the truth the offsets
// must agree with.
func logSize(t *testing.T, rdb redis.UniversalClient, app string) (bytes, n int64) {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), eventlog.Key(testKeys.ks, app), "-", "+").Result()
	require.NoError(t, err)
	for _, e := range entries {
		ts, _ := e.Values["t"].(string)
		ev, _ := e.Values["ev"].(string)
		bytes += int64(len(ts) + len(ev))
	}
	return bytes, int64(len(entries))
}

func requireLogBytes(t *testing.T, rdb redis.UniversalClient, app string) int64 {
	t.Helper()
	want, _ := logSize(t, rdb, app)
	st, err := eventlog.For(testKeys.ks, app).Stats(context.Background(), rdb)
	require.NoError(t, err)
	require.Equal(t, want, st.Bytes, "Stats disagrees with the entries")
	return st.Bytes
}

// clientEvent is an event of size bytes of JSON.
func clientEvent(i, size int) string {
	head := fmt.Sprintf(`{"name":"client_event","channel":"private-c","event":"client-x","socket_id":"1.%d","data":"`, i)
	return head + strings.Repeat("x", size-len(head)-2) + `"}`
}

// TestEventLogBudget: many appenders at once (as many wsnodes would) flood
// the log with 10 KB events; the log stops at its byte budget and the
// refusals are counted. The count scripts' markers are held to it too: a
// count change with the log full is made, its event refused and counted,
// and once there is room the next one comes after an events_dropped
// notice.
func TestEventLogBudget(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		const (
			budget    = 200 << 10 // room for about 20 events
			size      = 10 << 10
			appenders = 8
			each      = 10
		)
		log := eventlog.For(testKeys.ks, "app")
		var refused atomic.Int64
		var wg sync.WaitGroup
		for a := range appenders {
			wg.Go(func() {
				for i := range each {
					n, bytes, err := log.Append(ctx, rdb, budget, clientEvent(a*each+i, size))
					assert.NoError(t, err) // not require: this is not the test's goroutine
					assert.LessOrEqual(t, bytes, int64(budget))
					refused.Add(int64(n))
				}
			})
		}
		wg.Wait()
		bytes, n := logSize(t, rdb, "app")
		entry := bytes / n
		require.LessOrEqual(t, bytes, int64(budget))
		require.Greater(t, bytes, int64(budget)-entry, "the log stopped short of its budget")
		require.Equal(t, int64(appenders*each), n+refused.Load(), "every event is either logged or refused")
		require.Equal(t, bytes, requireLogBytes(t, rdb, "app"))

		// With the log exactly full (a budget of its bytes), a flush's
		// markers are refused, its counts made.
		spec := logAll
		spec.Budget = bytes
		rec := NewRecorder(rdb, "n1", RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t),
			LogEvents: func(string) eventlog.Spec { return spec }})
		rec.Add("app", "presence-r", 1)
		rec.AddMember("app", "presence-r", "u1", []byte(`{}`), 1)
		require.NoError(t, rec.Flush(ctx))
		require.Len(t, eventLog(t, rdb, "app"), int(n))
		require.Equal(t, bytes, requireLogBytes(t, rdb, "app"))
		users, err := NewStore(rdb, testKeys.ks).UserCount(ctx, "app", "presence-r")
		require.NoError(t, err)
		require.EqualValues(t, 1, users, "the count change is made whatever the log")
		st, err := log.Stats(ctx, rdb)
		require.NoError(t, err)
		require.Equal(t, refused.Load()+2, st.Dropped, "the occupied and member_added markers")
		require.Equal(t, st.Dropped, st.Untold)

		// Room again: the next change's marker comes after the notice.
		require.NoError(t, rdb.XTrimMaxLen(ctx, log.Key, 0).Err())
		rec.Add("app", "news", 1)
		require.NoError(t, rec.Flush(ctx))
		require.Equal(t, []string{"events_dropped ", "channel_occupied news", "subscription_count news"}, eventLog(t, rdb, "app"))
		st, err = log.Stats(ctx, rdb)
		require.NoError(t, err)
		require.Zero(t, st.Untold)
	})
}
