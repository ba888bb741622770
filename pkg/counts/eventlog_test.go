package counts

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/pkg/logging"
)

// eventLog reads app's event log as "name channel [user]" lines.
func eventLog(t *testing.T, rdb redis.UniversalClient, app string) []string {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), EventLogKey(app), "-", "+").Result()
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

// TestEventLog: with LogEvents, the count scripts append exactly the edges
// they make to the app's event log, in the same unit: a channel occupied
// then vacated, a member's first socket and last, on any node; a reaped
// node's channels and members; nothing for apps without a log.
func TestEventLog(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		logs := func(app string) bool { return app == "app" }
		rec := func(node string) *Recorder {
			return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t), LogEvents: logs})
		}
		n1, n2 := rec("n1"), rec("n2")
		flush := func(r *Recorder) { require.NoError(t, r.Flush(ctx)) }

		n1.Add("app", "news", 1)
		n1.Add("other", "news", 1)
		flush(n1)
		n2.Add("app", "news", 1) // no edge: already occupied
		n2.Add("app", "presence-r", 1)
		n2.AddMember("app", "presence-r", "u1", []byte(`{}`), 1)
		flush(n2)
		n1.Add("app", "presence-r", 1)
		n1.AddMember("app", "presence-r", "u1", []byte(`{}`), 1) // u1's second socket: no edge
		n1.Add("app", "news", -1)
		flush(n1)
		require.Equal(t, []string{
			"channel_occupied news",
			"channel_occupied presence-r",
			"member_added presence-r u1",
		}, eventLog(t, rdb, "app"))

		// n2 dies: reaping it removes news's last subscriber; u1 still has n1.
		s := NewStore(rdb)
		s.LogEvents = logs
		ok, _, err := s.ReapNode(ctx, "app", "n2", 0)
		require.NoError(t, err)
		require.True(t, ok)
		n1.Add("app", "presence-r", -1)
		n1.AddMember("app", "presence-r", "u1", nil, -1)
		flush(n1)
		require.Equal(t, []string{
			"channel_occupied news",
			"channel_occupied presence-r",
			"member_added presence-r u1",
			"channel_vacated news",
			"member_removed presence-r u1",
			"channel_vacated presence-r",
		}, eventLog(t, rdb, "app"))
		require.Empty(t, eventLog(t, rdb, "other"))
	})
}

// TestUndeclaredFieldsRetry: every key a count script touches must be in
// KEYS (Redis Cluster moves keys under a script that does not declare
// them). A replace that meets old fields its caller did not know about
// (a presence member the local truth no longer has) writes nothing, names
// them, and the recorder's next replace declares them: the contribution
// ends exact and the audit clean.
func TestUndeclaredFieldsRetry(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
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
		s := NewStore(rdb)
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
