package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

// staleCall is an apply.lua call a recorder sent and gave up on: Redis may
// still run it, at any later time.
type staleCall struct {
	keys []string
	args []any
}

// run runs the call now, as Redis would run the command read late from a
// connection the client closed, and returns apply.lua's status.
func (c staleCall) run(t testing.TB, rdb redis.UniversalClient) int64 {
	t.Helper()
	res, err := parseResult(applyScript.Run(context.Background(), rdb, c.keys, c.args...))
	require.NoError(t, err)
	return res.status
}

// loseFlush does what a flush of r's pending changes does when every call
// times out in the client (a Redis starved of CPU): it takes the changes
// and builds the apply.lua calls as a flush would, fails them, so r's apps
// republish at the next flush, and returns the calls unsent. It returns
// nil, doing nothing, if an app of r is to republish already (its flush
// would start with a retire, not deltas).
func loseFlush(t testing.TB, r *Recorder) []staleCall {
	t.Helper()
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	for _, st := range r.apps {
		if !st.registered {
			r.mu.Unlock()
			return nil
		}
	}
	r.mu.Unlock()
	ops, _ := r.takeOps(false)
	calls := make([]staleCall, 0, len(ops))
	for _, o := range ops {
		require.False(t, o.replace)
		keys, args := r.applyCall(o)
		calls = append(calls, staleCall{keys, args})
		o.cmd = redis.NewCmd(context.Background())
		o.cmd.SetErr(context.DeadlineExceeded)
	}
	r.settle(ops, context.DeadlineExceeded)
	return calls
}

// The hole the hour soak found: a delta that timed out in the client but
// that Redis runs after the node's republish (Redis starved of CPU holds
// the old connection's command and the new one's retire, and may run them
// in either order) must not land on the republished truth.
func TestStaleDeltaAfterRepublishIsRefused(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r := newRecorder(t, rdb, "n")
		r.Add("app", "x", 2)
		r.Add("app", "presence-p", 1)
		r.AddMember("app", "presence-p", "u1", json.RawMessage(`{}`), 1)
		r.AddConnections("app", 1)
		require.NoError(t, r.Flush(ctx))

		// A socket comes and subscribes; the flush that carries it
		// times out in the client, but Redis has the command.
		r.AddConnections("app", 1)
		r.Add("app", "x", 1)
		r.Add("app", "presence-p", 1)
		r.AddMember("app", "presence-p", "u2", json.RawMessage(`{}`), 1)
		stale := loseFlush(t, r)
		require.Len(t, stale, 1)

		// The next flush republishes the local truth, which has the socket.
		require.NoError(t, r.Flush(ctx))
		// Then Redis runs the command it was sent before.
		status := stale[0].run(t, rdb)

		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, map[string]int64{"x": 3, "presence-p": 2}, s.global, "channel counts must be the local truth")
		require.Equal(t, int64(2), s.conns, "connections must be the local truth")
		require.Equal(t, localFields(r, "app"), s.contrib["n"], "the contribution must be the local truth")
		require.Equal(t, int64(statusUnregistered), status, "the stale delta is refused")

		// And they stay so: the next heartbeat is taken as it is.
		require.NoError(t, r.Heartbeat(ctx))
		s = takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, int64(2), s.conns)
		require.Equal(t, localFields(r, "app"), s.contrib["n"])
	})
}

// The epochs hash holds the registered nodes only: a reap and a graceful
// removal delete a node's epoch with its registration, so nodes that come
// and go (every start is a new node id) leave nothing behind. Nodes of a
// rolling upgrade's older versions are reaped as before: a node an older
// wsnode registered has no epoch, and an epoch an older cleaner left on a
// node it reaped goes when a reap finds that node gone.
func TestEpochsHoldRegisteredNodesOnly(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		epochs := func() map[string]string {
			t.Helper()
			m, err := rdb.HGetAll(ctx, testKeys.epochsKey("app")).Result()
			require.NoError(t, err)
			return m
		}
		for i := range 6 {
			node := fmt.Sprintf("n%d", i)
			r := newRecorder(t, rdb, node)
			r.Add("app", "x", 1)
			require.NoError(t, r.Flush(ctx))
			first := epochs()[node]
			require.NotEmpty(t, first)
			if i%2 == 0 {
				// Reaped while alive: it republishes under a new epoch.
				ok, _, err := store.ReapNode(ctx, "app", node, 0)
				require.NoError(t, err)
				require.True(t, ok)
				require.NotContains(t, epochs(), node)
				require.NoError(t, r.Heartbeat(ctx))
				require.NotEqual(t, first, epochs()[node])
				checkInvariants(t, takeSnapshot(t, rdb, "app"))
			}
			if i%3 == 0 {
				require.NoError(t, r.Remove(ctx)) // a graceful stop
			} else {
				ok, _, err := store.ReapNode(ctx, "app", node, 0) // a crash
				require.NoError(t, err)
				require.True(t, ok)
			}
			checkInvariants(t, takeSnapshot(t, rdb, "app"))
		}
		n, err := rdb.Exists(ctx, testKeys.epochsKey("app")).Result()
		require.NoError(t, err)
		require.Zero(t, n, "no epoch outlives its node")

		// A node an older wsnode registered: no epoch, reaped all the same.
		require.NoError(t, rdb.ZAdd(ctx, testKeys.nodesKey("app"), redis.Z{Score: 1, Member: "old"}).Err())
		ok, _, err := store.ReapNode(ctx, "app", "old", 0)
		require.NoError(t, err)
		require.True(t, ok)
		// An epoch an older cleaner left (it unregistered the node only).
		require.NoError(t, rdb.HSet(ctx, testKeys.epochsKey("app"), "left", "0123456789abcdef").Err())
		ok, _, err = store.ReapNode(ctx, "app", "left", 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.Empty(t, epochs())
		checkInvariants(t, takeSnapshot(t, rdb, "app"))
	})
}

// A retire can be late too: one that timed out in the client runs after
// the republish that followed it. It takes the republished contribution
// aside as a reap under way and sets its own epoch, so the node's next
// unit is refused and it republishes again; once the reap is drained (the
// cleaner's FinishReaps), the counts are the truth.
func TestStaleRetireAfterRepublishIsFenced(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		r := newRecorder(t, rdb, "n")
		r.Add("app", "x", 2)
		r.AddConnections("app", 2)
		require.NoError(t, r.Flush(ctx))

		// The retire the recorder gave up on, run only now.
		_, ok, _, err := store.startReap(ctx, "app", "n", -1, newEpoch(), "")
		require.NoError(t, err)
		require.True(t, ok)
		r.Add("app", "x", 1)
		require.NoError(t, r.Flush(ctx), "refused, then republished in the same flush")
		_, err = store.FinishReaps(ctx, "app")
		require.NoError(t, err)

		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, map[string]int64{"x": 3}, s.global)
		require.Equal(t, int64(2), s.conns)
		require.Equal(t, localFields(r, "app"), s.contrib["n"])
	})
}
