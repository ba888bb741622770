package counts

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// churner is a simulated wsnode whose sockets come and go at random on a
// few channels, presence channels and connections, flushing as it goes.
type churner struct {
	r    *Recorder
	stop chan struct{}
	done chan error
}

// startChurn starts n churners on app; stopChurn stops them and flushes.
func startChurn(t *testing.T, rdb redis.UniversalClient, app string, n int) []*churner {
	t.Helper()
	var cs []*churner
	for i := range n {
		c := &churner{r: newRecorder(t, rdb, fmt.Sprintf("churn%d", i)), stop: make(chan struct{}), done: make(chan error, 1)}
		go func() { c.done <- c.run(app, uint64(i)) }()
		cs = append(cs, c)
	}
	return cs
}

func stopChurn(t *testing.T, cs []*churner) {
	t.Helper()
	for _, c := range cs {
		close(c.stop)
	}
	for _, c := range cs {
		require.NoError(t, <-c.done)
	}
}

func (c *churner) run(app string, seed uint64) error {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	subs := map[string]int64{}
	members := map[[2]string]int64{}
	var conns int64
	for {
		select {
		case <-c.stop:
			// A heartbeat, not a flush: a node reaped since its last write
			// learns it here and republishes.
			return c.r.Heartbeat(ctx)
		default:
		}
		ch := fmt.Sprintf("ch%d", rng.IntN(4))
		leave := rng.IntN(2) == 0
		switch rng.IntN(3) {
		case 0:
			if leave && subs[ch] > 0 {
				subs[ch]--
				c.r.Add(app, ch, -1)
			} else {
				subs[ch]++
				c.r.Add(app, ch, 1)
			}
		case 1:
			pch, user := "presence-"+ch, fmt.Sprintf("u%d", rng.IntN(3))
			k := [2]string{pch, user}
			if leave && members[k] > 0 {
				members[k]--
				c.r.Add(app, pch, -1)
				c.r.AddMember(app, pch, user, nil, -1)
			} else {
				members[k]++
				c.r.Add(app, pch, 1)
				c.r.AddMember(app, pch, user, json.RawMessage(`{"name":"`+user+`"}`), 1)
			}
		default:
			if leave && conns > 0 {
				conns--
				c.r.AddConnections(app, -1)
			} else {
				conns++
				c.r.AddConnections(app, 1)
			}
		}
		if rng.IntN(3) == 0 {
			if err := c.r.Flush(ctx); err != nil {
				return err
			}
		}
	}
}

func TestAuditCleanWhileRecordersChurn(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		// One entry a slice: flushes and reaps land between every two.
		store.SliceSize = 1
		cs := startChurn(t, rdb, "app", 3)
		// Reaping live nodes makes them republish: more atomic units the
		// audit must never see half-way.
		for i := range 40 {
			if i%10 == 5 {
				_, _, err := store.ReapNode(ctx, "app", fmt.Sprintf("churn%d", i%3), 0)
				require.NoError(t, err)
			}
			d, err := store.Audit(ctx, "app")
			require.NoError(t, err)
			require.False(t, d.Found(), "audit during churn found %+v", d.Diffs)
		}
		stopChurn(t, cs)
		checkInvariants(t, takeSnapshot(t, rdb, "app"))
		d, err := store.Audit(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, Drift{App: "app", Nodes: 3}, d)
	})
}

func TestAuditFindsInjectedDriftExactly(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		a, b := newRecorder(t, rdb, "a"), newRecorder(t, rdb, "b")
		a.Add("app", "chat", 2)
		a.AddConnections("app", 2)
		b.Add("app", "chat", 1)
		b.AddConnections("app", 1)
		for r, user := range map[*Recorder]string{a: "u1", b: "u2"} {
			r.Add("app", "presence-x", 1)
			r.AddMember("app", "presence-x", user, json.RawMessage(`{}`), 1)
			require.NoError(t, r.Flush(ctx))
		}
		d, err := store.Audit(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, Drift{App: "app", Nodes: 2}, d)

		// Test-only writes behind the scripts' backs: every kind of drift.
		g := testKeys.globalKey("app")
		require.NoError(t, rdb.ZIncrBy(ctx, g, 2, "chat").Err())
		require.NoError(t, rdb.ZAdd(ctx, g, redis.Z{Member: "ghost", Score: 3}).Err())
		require.NoError(t, rdb.ZAdd(ctx, g, redis.Z{Member: "zero", Score: 0}).Err())
		require.NoError(t, rdb.ZAdd(ctx, g, redis.Z{Member: "negative", Score: -1}).Err())
		require.NoError(t, rdb.ZRem(ctx, g, "presence-x").Err())
		require.NoError(t, rdb.HSet(ctx, testKeys.membersKey("app", "presence-x"), "u1", 4).Err())
		require.NoError(t, rdb.HDel(ctx, testKeys.membersKey("app", "presence-x"), "u2").Err())
		// Named by neither the global nor any contribution: only SCAN finds it.
		require.NoError(t, rdb.HSet(ctx, testKeys.membersKey("app", "presence-orphan"), "u9", 1).Err())
		require.NoError(t, rdb.Set(ctx, testKeys.connsKey("app"), 7, 0).Err())
		require.NoError(t, rdb.HSet(ctx, testKeys.nodeKey("app", "a"), channelField("bad"), 0).Err())

		d, err = store.Audit(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, Drift{App: "app", Nodes: 2, Diffs: []Difference{
			{Kind: KindChannel, Channel: "chat", Want: 3, Have: 5, Present: true},
			{Kind: KindChannel, Channel: "ghost", Want: 0, Have: 3, Present: true},
			{Kind: KindChannel, Channel: "negative", Want: 0, Have: -1, Present: true},
			{Kind: KindChannel, Channel: "presence-x", Want: 2},
			{Kind: KindChannel, Channel: "zero", Want: 0, Have: 0, Present: true},
			{Kind: KindConns, Want: 3, Have: 7, Present: true},
			{Kind: KindContribution, Node: "a", Field: "c:bad", Channel: "bad", Have: 0, Present: true},
			{Kind: KindMember, Channel: "presence-orphan", User: "u9", Want: 0, Have: 1, Present: true},
			{Kind: KindMember, Channel: "presence-x", User: "u1", Want: 1, Have: 4, Present: true},
			{Kind: KindMember, Channel: "presence-x", User: "u2", Want: 1},
		}}, d)

		n, err := store.Repair(ctx, "app", d)
		require.NoError(t, err)
		require.Equal(t, 9, n, "every entry but the node's own field")
		n, err = store.Repair(ctx, "app", d)
		require.NoError(t, err)
		require.Zero(t, n, "repairing twice changes nothing")

		d, err = store.Audit(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, []Difference{{Kind: KindContribution, Node: "a", Field: "c:bad", Channel: "bad", Present: true}}, d.Diffs,
			"Repair never touches a node's contribution")
		require.NoError(t, rdb.HDel(ctx, testKeys.nodeKey("app", "a"), channelField("bad")).Err())
		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		require.Equal(t, map[string]int64{"chat": 3, "presence-x": 2}, s.global)
		users, err := store.Members(ctx, "app", "presence-x")
		require.NoError(t, err)
		require.Len(t, users, 2)
		orphans, err := store.UserCount(ctx, "app", "presence-orphan")
		require.NoError(t, err)
		require.Zero(t, orphans)
	})
}

// Flushes, reaps and republishes land between the audit's slices while
// one channel nobody writes is corrupted: the audit reports that drift,
// and only that, every time.
func TestAuditSlicedFindsOnlyRealDrift(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		store.SliceSize = 1
		quiet := newRecorder(t, rdb, "quiet")
		for i := range 30 {
			quiet.Add("app", fmt.Sprintf("still%d", i), 1)
		}
		require.NoError(t, quiet.Flush(ctx))
		cs := startChurn(t, rdb, "app", 3)
		require.NoError(t, CorruptChannel(ctx, rdb, testKeys.ks, "app", "still7", 2))
		require.NoError(t, CorruptChannel(ctx, rdb, testKeys.ks, "app", "nobody", 1))
		for i := range 20 {
			if i%5 == 2 {
				_, _, err := store.ReapNode(ctx, "app", fmt.Sprintf("churn%d", i%3), 0)
				require.NoError(t, err)
			}
			d, err := store.Audit(ctx, "app")
			require.NoError(t, err)
			require.Equal(t, []Difference{
				{Kind: KindChannel, Channel: "nobody", Want: 0, Have: 1, Present: true},
				{Kind: KindChannel, Channel: "still7", Want: 1, Have: 3, Present: true},
			}, d.Diffs)
		}
		stopChurn(t, cs)
	})
}

// TestAuditDeclaresEveryKey: audit.lua reads only keys it was given. Given
// none of the nodes' contributions it compares nothing and says so; a
// member hash the SCAN could not find (deleted behind the scripts' backs)
// but a contribution names is declared on the retry, and its members are
// reported missing.
func TestAuditDeclaresEveryKey(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		r := newRecorder(t, rdb, "a")
		r.Add("app", "presence-x", 1)
		r.AddMember("app", "presence-x", "u1", json.RawMessage(`{}`), 1)
		require.NoError(t, r.Flush(ctx))

		v, err := auditScript.Run(ctx, rdb, append(testKeys.auditKeys("app"), testKeys.connsKey("app")), testKeys.appPrefix("app")).Slice()
		require.NoError(t, err)
		require.Equal(t, []any{int64(statusUndeclared), int64(1), []any{}}, v)

		require.NoError(t, rdb.Del(ctx, testKeys.membersKey("app", "presence-x")).Err())
		d, err := NewStore(rdb, testKeys.ks).Audit(ctx, "app")
		require.NoError(t, err)
		require.Equal(t, []Difference{{Kind: KindMember, Channel: "presence-x", User: "u1", Want: 1}}, d.Diffs)
	})
}

// TestRepairKeepsConcurrentUpdates injects drift into entries that
// recorders are changing at the same time, and repairs it while they go on:
// each repair is one atomic unit, so no concurrent change is lost and the
// invariants hold afterwards.
func TestRepairKeepsConcurrentUpdates(t *testing.T) {
	t.Parallel()
	redistest.Backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		store := NewStore(rdb, testKeys.ks)
		cs := startChurn(t, rdb, "app", 3)
		// Make sure every entry to corrupt exists before corrupting it.
		for _, c := range cs {
			c.r.Add("app", "ch0", 1)
			c.r.Add("app", "presence-ch1", 1)
			c.r.AddMember("app", "presence-ch1", "u0", nil, 1)
			c.r.AddConnections("app", 1)
			require.NoError(t, c.r.Flush(ctx))
		}

		// Positive drift only: the churners keep the real counts above zero,
		// so no script clamps the drift away before the repair.
		require.NoError(t, rdb.ZIncrBy(ctx, testKeys.globalKey("app"), 5, "ch0").Err())
		require.NoError(t, rdb.ZAdd(ctx, testKeys.globalKey("app"), redis.Z{Member: "ghost", Score: 2}).Err())
		require.NoError(t, rdb.HIncrBy(ctx, testKeys.membersKey("app", "presence-ch1"), "u0", 3).Err())
		require.NoError(t, rdb.IncrBy(ctx, testKeys.connsKey("app"), 4).Err())

		d, err := store.Audit(ctx, "app")
		require.NoError(t, err)
		type key struct {
			kind          Kind
			channel, user string
		}
		var got []key
		for _, diff := range d.Diffs {
			got = append(got, key{diff.Kind, diff.Channel, diff.User})
		}
		require.Equal(t, []key{{KindChannel, "ch0", ""}, {KindChannel, "ghost", ""}, {KindConns, "", ""}, {KindMember, "presence-ch1", "u0"}}, got)
		for _, diff := range d.Diffs {
			if diff.Kind != KindChannel || diff.Channel != "ghost" {
				require.Equal(t, map[Kind]int64{KindChannel: 5, KindMember: 3, KindConns: 4}[diff.Kind], diff.Have-diff.Want, "%+v", diff)
			}
		}

		n, err := store.Repair(ctx, "app", d)
		require.NoError(t, err)
		require.Equal(t, 4, n)
		for range 10 {
			checkInvariants(t, takeSnapshot(t, rdb, "app"))
		}
		stopChurn(t, cs)
		s := takeSnapshot(t, rdb, "app")
		checkInvariants(t, s)
		truth := map[string]int64{}
		for _, c := range cs {
			for ch, n := range c.r.Local("app") {
				truth[ch] += n
			}
		}
		require.Equal(t, truth, s.global, "no concurrent change was lost")
		d, err = store.Audit(ctx, "app")
		require.NoError(t, err)
		require.False(t, d.Found(), "%+v", d.Diffs)
	})
}

func TestReapReportsLatencyAndNodesAreCounted(t *testing.T) {
	// Not parallel: it bounds how long something takes, which other
	// tests beside it would stretch.
	rdb := newSingle(t)
	ctx := context.Background()
	store := NewStore(rdb, testKeys.ks)
	r := newRecorder(t, rdb, "n")
	r.Add("app", "x", 1)
	require.NoError(t, r.Flush(ctx))
	nc, err := store.Nodes(ctx, "app", time.Minute)
	require.NoError(t, err)
	require.Equal(t, NodeCount{Registered: 1}, nc)
	require.Equal(t, 1, nc.Alive())

	const deadAfter = 30 * time.Millisecond
	require.Eventually(t, func() bool {
		nc, err := store.Nodes(ctx, "app", deadAfter)
		return err == nil && nc.Stale == 1 && nc.Alive() == 0
	}, 5*time.Second, 5*time.Millisecond)
	ok, reaped, err := store.ReapNode(ctx, "app", "n", deadAfter)
	require.NoError(t, err)
	require.True(t, ok)
	require.GreaterOrEqual(t, reaped.SinceSeen, deadAfter)
	require.Less(t, reaped.SinceSeen, 5*time.Second)
	nc, err = store.Nodes(ctx, "app", deadAfter)
	require.NoError(t, err)
	require.Equal(t, NodeCount{}, nc)
}

func TestGlobEscape(t *testing.T) {
	t.Parallel()
	require.Equal(t, `hc:{a\*b\?\[c\]\\}:members:*`, keyspace.GlobEscape(testKeys.membersKeyPrefix(`a*b?[c]\`))+"*", "the pattern ScanPrefix uses")
	ch, ok := testKeys.membersKeyChannel("app", testKeys.membersKey("app", "presence-x"))
	require.True(t, ok)
	require.Equal(t, "presence-x", ch)
}
