package wsnode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/protocol"
)

// signinAs signs c (socket id) in as user with the given watchlist and
// returns the frame that answered.
func signinAs(t *testing.T, c *websocket.Conn, socketID, user string, watchlist []string) frame {
	t.Helper()
	ud := map[string]any{"id": user}
	if watchlist != nil {
		ud["watchlist"] = watchlist
	}
	userData, err := json.Marshal(ud)
	require.NoError(t, err)
	b, err := json.Marshal(map[string]any{"event": "pusher:signin",
		"data": map[string]string{"auth": sign(socketID + "::user::" + string(userData)), "user_data": string(userData)}})
	require.NoError(t, err)
	send(t, c, string(b))
	return read(t, c)
}

type watchlistEvent struct {
	Name    string   `json:"name"`
	UserIDs []string `json:"user_ids"`
}

// readWatchlist reads the next frame, which must be
// pusher_internal:watchlist_events, and returns its events.
func readWatchlist(t *testing.T, c *websocket.Conn) []watchlistEvent {
	t.Helper()
	f := read(t, c)
	require.Equal(t, "pusher_internal:watchlist_events", f.Event, f.raw)
	require.Empty(t, f.Channel, f.raw)
	require.NotNil(t, f.Data, f.raw)
	var d struct {
		Events []watchlistEvent `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(*f.Data), &d), f.raw)
	return d.Events
}

func (n *testNode) requireOnline(t *testing.T, user string, want bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		on, err := n.store.AreMembers(context.Background(), appID, protocol.SignedInChannel, []string{user})
		require.NoError(c, err)
		assert.Equal(c, want, on[0])
	}, wait, tick)
}

// TestWatchlistAcrossNodes: a socket signed in with a watchlist is told at
// once who of it is online anywhere in the cluster and who is not, then
// each watched user's first signed-in socket anywhere (online) and last
// (offline), never their other sockets'.
func TestWatchlistAcrossNodes(t *testing.T) {
	t.Parallel()
	nodes := startNodes(t, 2)
	a, b := nodes[0].run(t), nodes[1].run(t)

	// c is online before the watcher signs in.
	cc, ccID := b.connect(t)
	require.Equal(t, "pusher:signin_success", signinAs(t, cc, ccID, "c", nil).Event)
	b.requireOnline(t, "c", true)

	w, wID := a.connect(t)
	require.Equal(t, "pusher:signin_success", signinAs(t, w, wID, "w", []string{"b", "c", "d", "b"}).Event)
	require.Equal(t, []watchlistEvent{{"online", []string{"c"}}, {"offline", []string{"b", "d"}}}, readWatchlist(t, w),
		"the first status names every watched user once")

	// b's first socket, on the other node: online.
	b1, b1ID := b.connect(t)
	require.Equal(t, "pusher:signin_success", signinAs(t, b1, b1ID, "b", nil).Event)
	require.Equal(t, []watchlistEvent{{"online", []string{"b"}}}, readWatchlist(t, w))
	// b's second socket, on the watcher's node: nothing; b's first goes:
	// still online.
	b2, b2ID := a.connect(t)
	require.Equal(t, "pusher:signin_success", signinAs(t, b2, b2ID, "b", nil).Event)
	rdb := a.redis.Client(t)
	requireSockets := func(want string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := rdb.HGet(context.Background(), counts.MembersKey(keyspace.Space{}, appID, protocol.SignedInChannel), "b").Result()
			require.NoError(c, err)
			assert.Equal(c, want, n, "b's signed-in sockets cluster-wide")
		}, wait, tick)
	}
	requireSockets("2")
	require.NoError(t, b1.Close(websocket.StatusNormalClosure, ""))
	requireSockets("1")
	// d comes: the next frame is d's online, so b's first socket's end sent nothing.
	d, dID := b.connect(t)
	require.Equal(t, "pusher:signin_success", signinAs(t, d, dID, "d", nil).Event)
	require.Equal(t, []watchlistEvent{{"online", []string{"d"}}}, readWatchlist(t, w))
	// b's last socket goes: offline.
	require.NoError(t, b2.Close(websocket.StatusNormalClosure, ""))
	require.Equal(t, []watchlistEvent{{"offline", []string{"b"}}}, readWatchlist(t, w))

	// The signed-in channel is nobody's to subscribe to.
	send(t, w, subscribeFrame(protocol.SignedInChannel, "", ""))
	f := read(t, w)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Contains(t, f.data(t)["message"], "Invalid channel name")
	chans, err := a.store.Channels(context.Background(), appID, "")
	require.NoError(t, err)
	require.NotContains(t, chans, protocol.SignedInChannel)
}

// TestWatchlistLimit: a watchlist of more than 100 ids signs in, is told
// pusher:error 4302, and watches the first 100.
func TestWatchlistLimit(t *testing.T) {
	t.Parallel()
	a := startNode(t).run(t)
	ids := make([]string, protocol.MaxWatchlist+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("u%03d", i)
	}
	w, wID := a.connect(t)
	require.Equal(t, "pusher:signin_success", signinAs(t, w, wID, "w", ids).Event)
	f := read(t, w)
	require.Equal(t, "pusher:error", f.Event, f.raw)
	require.Equal(t, 4302.0, f.data(t)["code"], f.raw)
	require.True(t, strings.HasPrefix(f.data(t)["message"].(string), "Watchlist limit exceeded"), f.raw)
	require.Equal(t, []watchlistEvent{{"offline", ids[:protocol.MaxWatchlist]}}, readWatchlist(t, w))

	// The last id is not watched, the first is.
	for _, u := range []string{ids[protocol.MaxWatchlist], ids[0]} {
		c, cID := a.connect(t)
		require.Equal(t, "pusher:signin_success", signinAs(t, c, cID, u, nil).Event)
	}
	require.Equal(t, []watchlistEvent{{"online", []string{ids[0]}}}, readWatchlist(t, w))
	pingPong(t, w)
	// A frame is counted once queued, which may be after the client read it.
	require.Eventually(t, func() bool {
		return metricstest.Value(t, a.reg, "headcount_wsnode_watchlist_events_total", "why", "signin") == 1 &&
			metricstest.Value(t, a.reg, "headcount_wsnode_watchlist_events_total", "why", "edge") == 1
	}, 5*time.Second, 5*time.Millisecond, "watchlist events counted")
	require.Equal(t, 1.0, metricstest.Value(t, a.reg, "headcount_wsnode_errors_total", "reason", "watchlist_limit"))
}
