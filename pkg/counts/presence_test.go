package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/logging"
)

// edgeLog collects what OnFlushed reports.
type edgeLog struct {
	mu      sync.Mutex
	members []MemberEdge
	counts  map[string]int64
}

func (l *edgeLog) record(f Edges) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range unversioned(f.Members) {
		e.UserInfo = nil
		l.members = append(l.members, e)
	}
	if l.counts == nil {
		l.counts = map[string]int64{}
	}
	for ch, n := range f.Channels {
		l.counts[ch] = n
	}
}

func (l *edgeLog) take() []MemberEdge {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.members
	l.members = nil
	return out
}

// unversioned returns edges with their versions zeroed, once it has
// checked that each has one (a member list is ordered against them).
func unversioned(edges []MemberEdge) []MemberEdge {
	out := make([]MemberEdge, 0, len(edges))
	for _, e := range edges {
		if e.Version <= 0 {
			panic(fmt.Sprintf("member edge %+v has no version", e))
		}
		e.Version = 0
		out = append(out, e)
	}
	return out
}

func recorderWithLog(t *testing.T, rdb redis.UniversalClient, node string) (*Recorder, *edgeLog) {
	l := &edgeLog{}
	return NewRecorder(rdb, node, RecorderOptions{Heartbeat: time.Hour, Logger: logging.TestLogger(t), OnFlushed: l.record}), l
}

// join and leave stand for one presence socket subscribing or leaving.
func join(r *Recorder, ch, user, info string) {
	r.Add("app", ch, 1)
	r.AddMember("app", ch, user, json.RawMessage(info), 1)
}

func leave(r *Recorder, ch, user string) {
	r.Add("app", ch, -1)
	r.AddMember("app", ch, user, nil, -1)
}

func TestPresenceIsExactAcrossNodes(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		a, la := recorderWithLog(t, rdb, "a")
		b, lb := recorderWithLog(t, rdb, "b")
		const ch = "presence-room"

		join(a, ch, "u1", `{"name":"one"}`)
		require.NoError(t, a.Flush(ctx))
		require.Equal(t, []MemberEdge{{Channel: ch, UserID: "u1", Added: true}}, la.take())
		require.EqualValues(t, 1, la.counts[ch])

		// u1's second socket, on another node: no new member.
		join(b, ch, "u1", `{"name":"one"}`)
		join(b, ch, "u2", `{"name":"two"}`)
		require.NoError(t, b.Flush(ctx))
		require.Equal(t, []MemberEdge{{Channel: ch, UserID: "u2", Added: true}}, lb.take())

		n, err := store.UserCount(ctx, "app", ch)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "u1 on two nodes counts once")
		subs, err := store.Channel(ctx, "app", ch)
		require.NoError(t, err)
		require.EqualValues(t, 3, subs, "but its sockets count twice")
		members, err := store.Members(ctx, "app", ch)
		require.NoError(t, err)
		require.Equal(t, map[string]json.RawMessage{"u1": json.RawMessage(`{"name":"one"}`), "u2": json.RawMessage(`{"name":"two"}`)}, members)

		// u1 leaves node a: still a member through node b.
		leave(a, ch, "u1")
		require.NoError(t, a.Flush(ctx))
		require.Empty(t, la.take())
		leave(b, ch, "u1")
		require.NoError(t, b.Flush(ctx))
		require.Equal(t, []MemberEdge{{Channel: ch, UserID: "u1"}}, lb.take())
		members, err = store.Members(ctx, "app", ch)
		require.NoError(t, err)
		require.Len(t, members, 1)
		checkInvariants(t, takeSnapshot(t, rdb, "app"))
	})
}

func TestReapReportsMembersAndVacatedChannels(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		dead, _ := recorderWithLog(t, rdb, "dead")
		live, _ := recorderWithLog(t, rdb, "live")
		join(dead, "presence-x", "alone", `{}`)
		join(dead, "presence-x", "both", `{}`)
		join(live, "presence-x", "both", `{}`)
		dead.Add("app", "public", 2)
		dead.AddConnections("app", 3)
		live.AddConnections("app", 1)
		require.NoError(t, dead.Flush(ctx))
		require.NoError(t, live.Flush(ctx))
		conns, err := store.Connections(ctx, "app")
		require.NoError(t, err)
		require.EqualValues(t, 4, conns)

		ok, reaped, err := store.ReapNode(ctx, "app", "dead", 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []MemberEdge{{Channel: "presence-x", UserID: "alone"}}, unversioned(reaped.Members),
			"only the member whose last socket was on the dead node leaves")
		require.Equal(t, map[string]int64{"presence-x": 1, "public": 0}, reaped.Channels)
		require.Equal(t, []string{"public"}, reaped.Vacated())
		conns, err = store.Connections(ctx, "app")
		require.NoError(t, err)
		require.EqualValues(t, 1, conns)
		checkInvariants(t, takeSnapshot(t, rdb, "app"))
	})
}

func TestReapedNodeRepublishesItsMembers(t *testing.T) {
	t.Parallel()
	rdb := newSingle(t)
	ctx := context.Background()
	store := NewStore(rdb, testKeys.ks)
	r, l := recorderWithLog(t, rdb, "n")
	join(r, "presence-x", "u", `{"a":1}`)
	require.NoError(t, r.Flush(ctx))
	l.take()
	_, reaped, err := store.ReapNode(ctx, "app", "n", 0)
	require.NoError(t, err)
	require.Len(t, reaped.Members, 1, "the cleaner announces the member gone")
	require.NoError(t, r.Heartbeat(ctx))
	require.Equal(t, []MemberEdge{{Channel: "presence-x", UserID: "u", Added: true}}, l.take(),
		"republishing brings the member back, and says so")
	members, err := store.Members(ctx, "app", "presence-x")
	require.NoError(t, err)
	require.Equal(t, json.RawMessage(`{"a":1}`), members["u"], "user_info is republished too")
}

func TestRemoveReportsWhatItTookAway(t *testing.T) {
	t.Parallel()
	rdb := newSingle(t)
	ctx := context.Background()
	r, l := recorderWithLog(t, rdb, "n")
	join(r, "presence-x", "u", `{}`)
	require.NoError(t, r.Flush(ctx))
	l.take()
	require.NoError(t, r.Remove(ctx))
	require.Equal(t, []MemberEdge{{Channel: "presence-x", UserID: "u"}}, l.take())
}
