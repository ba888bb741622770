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
