package counts

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/logging"
	"github.com/headcount/headcount/pkg/protocol"
)

// TestSignedInChannel: the signed-in users are members of
// protocol.SignedInChannel without a channel count. Their first socket and
// their last (or their node's reap) are member edges, as on presence
// channels, but the channel never appears among the counted channels and
// none of its edges reach the event log, whatever the app's webhooks.
func TestSignedInChannel(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		logs := func(string) eventlog.Spec { return logAll }
		var edges []MemberEdge
		rec := func(node string) *Recorder {
			return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t), LogEvents: logs,
				OnFlushed: func(e Edges) { edges = append(edges, unversioned(e.Members)...) }})
		}
		n1, n2 := rec("n1"), rec("n2")
		s := NewStore(rdb, testKeys.ks)
		s.LogEvents = logs
		ch := protocol.SignedInChannel

		n1.AddMember("app", ch, "u1", nil, 1)
		n1.Add("app", "presence-r", 1)
		n1.AddMember("app", "presence-r", "u1", nil, 1)
		require.NoError(t, n1.Flush(ctx))
		n2.AddMember("app", ch, "u1", nil, 1) // u1's second socket: no edge
		n2.AddMember("app", ch, "u2", nil, 1)
		require.NoError(t, n2.Flush(ctx))
		require.ElementsMatch(t, []MemberEdge{{Channel: ch, UserID: "u1", Added: true}, {Channel: "presence-r", UserID: "u1", Added: true},
			{Channel: ch, UserID: "u2", Added: true}}, edges)

		on, err := s.AreMembers(ctx, "app", ch, []string{"u2", "u3", "u1"})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true}, on)
		chans, err := s.Channels(ctx, "app", "")
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"presence-r": 1}, chans, "the signed-in channel has no count")

		// n2 dies: u2 goes offline with the reap, u1 stays on n1.
		ok, reaped, err := s.ReapNode(ctx, "app", "n2", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []MemberEdge{{Channel: ch, UserID: "u2"}}, unversioned(reaped.Members))
		edges = nil
		n1.AddMember("app", ch, "u1", nil, -1)
		require.NoError(t, n1.Flush(ctx))
		require.Equal(t, []MemberEdge{{Channel: ch, UserID: "u1"}}, edges)

		require.Equal(t, []string{"channel_occupied presence-r", "member_added presence-r u1"}, eventLog(t, rdb, "app"),
			"no webhook event for the internal channel")
		rep, err := s.Audit(ctx, "app")
		require.NoError(t, err)
		require.False(t, rep.Found(), "the audit covers the signed-in channel's members: %+v", rep)
	})
}
