package cleaner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/proctest"
	"github.com/headcount/headcount/internal/redistest"
	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lease"
	"github.com/headcount/headcount/pkg/logging"
)

func newCleaner(t *testing.T, redisURL string) *App {
	cfg := config.DefaultCleaner()
	cfg.Redis = redisURL
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.DeadAfter = 200 * time.Millisecond
	cfg.ScanInterval = 20 * time.Millisecond
	cfg.LeaseTTL = 300 * time.Millisecond
	a, err := New(Options{Config: cfg, Logger: logging.TestLogger(t), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	return a
}

// TestTwoActiveCleanersNeverSubtractTwice runs two cleaners' scans at once
// with the lease check disabled (both believe they are active) over many
// dead nodes, while live nodes keep writing. Every dead node must be
// subtracted exactly once: the global ends equal to the live nodes' counts.
func TestTwoActiveCleanersNeverSubtractTwice(t *testing.T) {
	// Not parallel: its live node must heartbeat within the 200 ms
	// dead-after, which tests beside it stretch past on two cores.
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	store := counts.NewStore(rdb, keyspace.Space{})

	const dead, live = 40, 3
	for i := range dead {
		r := counts.NewRecorder(rdb, fmt.Sprintf("dead%d", i), counts.RecorderOptions{Heartbeat: time.Hour})
		r.Add("app", "shared", 1)
		r.Add("app", fmt.Sprintf("own%d", i), 2)
		require.NoError(t, r.Flush(ctx))
	}
	var lives []*counts.Recorder
	for i := range live {
		r := counts.NewRecorder(rdb, fmt.Sprintf("live%d", i), counts.RecorderOptions{Heartbeat: time.Hour})
		r.Add("app", "shared", 5)
		require.NoError(t, r.Flush(ctx))
		lives = append(lives, r)
	}
	// Let the dead nodes go stale while the live ones heartbeat.
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range lives {
			require.NoError(t, r.Heartbeat(ctx))
		}
		stale, err := store.StaleNodes(ctx, "app", 200*time.Millisecond, 1000)
		require.NoError(t, err)
		if len(stale) == dead {
			break
		}
		require.True(t, time.Now().Before(deadline), "dead nodes never went stale")
	}

	a, b := newCleaner(t, srv.URL()), newCleaner(t, srv.URL())
	always := func() bool { return true }
	var wg sync.WaitGroup
	for _, c := range []*App{a, b, a, b} {
		wg.Go(func() { require.NoError(t, c.scan(ctx, always)) })
	}
	wg.Wait()

	all, err := store.Channels(ctx, "app", "")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"shared": 5 * live}, all)
	reaped := reapedTotal(a) + reapedTotal(b)
	require.EqualValues(t, dead, reaped, "each dead node reaped exactly once between the two")
}

// TestWithoutLeaseEveryCleanerIsActive runs two cleaners with --lease-ttl
// 0: both say loudly that they have no lease, both are active at once and
// take no lease key, and each dead node is still reaped exactly once
// between them while a live node's counts stay.
func TestWithoutLeaseEveryCleanerIsActive(t *testing.T) {
	// Not parallel: its live node must heartbeat within the 200 ms
	// dead-after, which tests beside it stretch past on two cores.
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	store := counts.NewStore(rdb, keyspace.Space{})

	var cleaners []*App
	var logs []*proctest.Buffer
	done := make(chan error, 2)
	for range 2 {
		cfg := config.DefaultCleaner()
		cfg.Redis = srv.URL()
		cfg.AdminAddr = ""
		cfg.DeadAfter = 200 * time.Millisecond
		cfg.ScanInterval = 20 * time.Millisecond
		cfg.LeaseTTL = 0
		log := &proctest.Buffer{}
		a, err := New(Options{Config: cfg, Logger: logging.New("cleaner", "info", "text", log), Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
		cleaners, logs = append(cleaners, a), append(logs, log)
		go func() { done <- a.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range cleaners {
			require.NoError(t, <-done)
		}
		for _, a := range cleaners {
			require.EqualValues(t, 0, testutil.ToFloat64(a.m.active), "inactive once stopped")
		}
	}()
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(cleaners[0].m.active) == 1 && testutil.ToFloat64(cleaners[1].m.active) == 1
	}, 5*time.Second, 5*time.Millisecond, "both cleaners active at once")
	for _, log := range logs {
		require.Regexp(t, `\[WARN\] .*NO LEASE \(--lease-ttl 0\).*for tests only`, log.String())
	}
	n, err := rdb.Exists(ctx, lease.CleanerKey(keyspace.Space{})).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no lease is taken")

	const dead = 20
	for i := range dead {
		r := counts.NewRecorder(rdb, fmt.Sprintf("dead%d", i), counts.RecorderOptions{Heartbeat: time.Hour})
		r.Add("app", "shared", 1)
		require.NoError(t, r.Flush(ctx))
	}
	live := counts.NewRecorder(rdb, "live", counts.RecorderOptions{Heartbeat: time.Hour})
	live.Add("app", "shared", 5)
	require.NoError(t, live.Flush(ctx))
	require.Eventually(t, func() bool {
		require.NoError(t, live.Heartbeat(ctx))
		all, err := store.Channels(ctx, "app", "")
		require.NoError(t, err)
		reaped := reapedTotal(cleaners[0]) + reapedTotal(cleaners[1])
		return reaped == dead && all["shared"] == 5
	}, 5*time.Second, 20*time.Millisecond, "every dead node reaped once, the live one's counts kept")
	all, err := store.Channels(ctx, "app", "")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"shared": 5}, all)
}

func TestActiveCleanerReapsAndPassiveTakesOver(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	store := counts.NewStore(rdb, keyspace.Space{})

	ctxA, stopA := context.WithCancel(ctx)
	ctxB, stopB := context.WithCancel(ctx)
	a, b := newCleaner(t, srv.URL()), newCleaner(t, srv.URL())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	require.Eventually(t, func() bool { return testutil.ToFloat64(a.m.active) == 1 }, 5*time.Second, 5*time.Millisecond)
	doneB := make(chan error, 1)
	go func() { doneB <- b.Run(ctxB) }()
	defer func() { stopB(); require.NoError(t, <-doneB) }()

	node := counts.NewRecorder(rdb, "n1", counts.RecorderOptions{Heartbeat: time.Hour})
	node.Add("app", "x", 3)
	require.NoError(t, node.Flush(ctx))
	// The count drops in Redis before the reaper counts the reap: wait for both.
	require.Eventually(t, func() bool { n, _ := store.Channel(ctx, "app", "x"); return n == 0 && reapedTotal(a) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 0, testutil.ToFloat64(b.m.active), "b stays passive while a holds the lease")

	stopA()
	require.NoError(t, <-doneA)
	require.Eventually(t, func() bool { return testutil.ToFloat64(b.m.active) == 1 }, 5*time.Second, 5*time.Millisecond)
	node2 := counts.NewRecorder(rdb, "n2", counts.RecorderOptions{Heartbeat: time.Hour})
	node2.Add("app", "y", 1)
	require.NoError(t, node2.Flush(ctx))
	require.Eventually(t, func() bool { n, _ := store.Channel(ctx, "app", "y"); return n == 0 && reapedTotal(b) == 1 }, 5*time.Second, 5*time.Millisecond)
}

func TestScanStopsWhenLeaseIsNoLongerValid(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	r := counts.NewRecorder(rdb, "n", counts.RecorderOptions{Heartbeat: time.Hour})
	r.Add("app", "x", 1)
	require.NoError(t, r.Flush(ctx))
	c := newCleaner(t, srv.URL())
	require.Eventually(t, func() bool {
		stale, _ := c.store.StaleNodes(ctx, "app", c.cfg.DeadAfter, 10)
		return len(stale) == 1
	}, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, c.scan(ctx, func() bool { return false }))
	n, err := c.store.Channel(ctx, "app", "x")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a cleaner without a valid lease must not reap")
}

// TestReapAnnouncesMembersRemoved: a dead node's presence members whose last
// socket it held are announced gone to the surviving nodes; a member still
// connected elsewhere is not.
func TestReapAnnouncesMembersRemoved(t *testing.T) {
	// Not parallel: its live node must heartbeat within the 200 ms
	// dead-after, which tests beside it stretch past on two cores.
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	got := make(chan fanout.Message, 10)
	survivor := fanout.New(rdb, fanout.Options{})
	survivor.Join("app", "presence-x")
	busDone := make(chan error, 1)
	go func() {
		busDone <- survivor.Run(ctx, func(_ string, m fanout.Message) { got <- m })
	}()
	defer func() { cancel(); require.NoError(t, <-busDone) }()
	require.Eventually(t, survivor.Healthy, 5*time.Second, 5*time.Millisecond)

	dead := counts.NewRecorder(rdb, "dead", counts.RecorderOptions{Heartbeat: time.Hour})
	live := counts.NewRecorder(rdb, "live", counts.RecorderOptions{Heartbeat: time.Hour})
	for _, r := range []*counts.Recorder{dead, live} {
		r.Add("app", "presence-x", 1)
		r.AddMember("app", "presence-x", "shared", nil, 1)
	}
	dead.Add("app", "presence-x", 1)
	dead.AddMember("app", "presence-x", "alone", nil, 1)
	require.NoError(t, dead.Flush(ctx))
	require.NoError(t, live.Flush(ctx))

	c := newCleaner(t, srv.URL())
	require.Eventually(t, func() bool {
		require.NoError(t, live.Heartbeat(ctx))
		require.NoError(t, c.scan(ctx, func() bool { return true }))
		c.ann.Drain(ctx) // what Run announces; scan alone only queues
		n, _ := c.store.UserCount(ctx, "app", "presence-x")
		return n == 1
	}, 5*time.Second, 20*time.Millisecond)

	select {
	case m := <-got:
		// The reap's edge carries the app's version, which sockets whose
		// member list was read later leave out.
		require.Positive(t, m.Version)
		m.Version = 0
		require.Equal(t, fanout.Message{Channel: "presence-x", Event: "pusher_internal:member_removed", Data: `{"user_id":"alone"}`}, m)
	case <-time.After(5 * time.Second):
		t.Fatal("no member_removed announced")
	}
	select {
	case m := <-got:
		t.Fatalf("unexpected second announcement %+v", m)
	default:
	}
}

// TestReapStartsAdmissionGrace: a member of a capacity-limited channel on
// a node that died keeps the seat only for the grace, as if the socket had
// left, and then the head of the list is admitted (without the cleaner's
// Left the seat would wait for its one-hour ticket).
func TestReapStartsAdmissionGrace(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	reg, err := apps.New([]*apps.App{{ID: "app", Key: "k", Secret: "s", Enabled: true,
		Capacities: []apps.Capacity{{Prefix: "presence-room", Capacity: 1}},
		Admission:  apps.Admission{TicketSeconds: 3600, GraceSeconds: 1, DropoutSeconds: 3600}}})
	require.NoError(t, err)
	rule := admission.RuleFor(reg.ByID("app"), "presence-room")
	gate := admission.New(rdb, keyspace.Space{})
	res, err := gate.Check(ctx, "app", "presence-room", "alice", rule)
	require.NoError(t, err)
	require.Equal(t, admission.Admitted, res.Status)
	dead := counts.NewRecorder(rdb, "dead", counts.RecorderOptions{Heartbeat: time.Hour})
	dead.Add("app", "presence-room", 1)
	dead.AddMember("app", "presence-room", "alice", nil, 1)
	require.NoError(t, dead.Flush(ctx))
	res, err = gate.Check(ctx, "app", "presence-room", "bob", rule)
	require.NoError(t, err)
	require.Equal(t, 1, res.Position)

	cfg := config.DefaultCleaner()
	cfg.Redis, cfg.AdminAddr, cfg.Apps = srv.URL(), "127.0.0.1:0", reg
	cfg.DeadAfter, cfg.ScanInterval, cfg.LeaseTTL = 200*time.Millisecond, 20*time.Millisecond, 300*time.Millisecond
	c, err := New(Options{Config: cfg, Logger: logging.TestLogger(t), Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		require.NoError(t, c.scan(ctx, func() bool { return true }))
		c.ann.Drain(ctx) // what Run announces; scan alone only queues
		n, _ := c.store.UserCount(ctx, "app", "presence-room")
		return n == 0
	}, 5*time.Second, 20*time.Millisecond, "the dead node was never reaped")
	reaped := time.Now()
	require.Eventually(t, func() bool {
		st, _, err := gate.State(ctx, "app", "presence-room", rule)
		require.NoError(t, err)
		return st.Waiting == 0
	}, 5*time.Second, 20*time.Millisecond, "bob was not admitted after alice's grace")
	require.GreaterOrEqual(t, time.Since(reaped), 900*time.Millisecond, "alice's grace was not kept")
}

// reapedTotal is how many nodes of "app" a reaped, for either reason.
func reapedTotal(a *App) float64 {
	return testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonHeartbeat)) +
		testutil.ToFloat64(a.m.reaped.WithLabelValues("app", reasonClosed))
}

// TestCountersStartAtZero: the lease counters exist at 0 from the start,
// and an app's reap counters from its first scan, or from the start for the
// configured apps, so alerts on their increase see the first change too (a
// series born at 1 is not an increase).
func TestCountersStartAtZero(t *testing.T) {
	// Not parallel: its live node must heartbeat within the 200 ms
	// dead-after, which tests beside it stretch past on two cores.
	srv := redistest.New(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	live := counts.NewRecorder(rdb, "live", counts.RecorderOptions{Heartbeat: 20 * time.Millisecond})
	live.Add("app", "x", 1)
	require.NoError(t, live.Flush(ctx))
	liveDone := make(chan error, 1)
	go func() { liveDone <- live.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-liveDone) }()

	a := newCleaner(t, srv.URL())
	require.Equal(t, 2, testutil.CollectAndCount(a.m.leaseChanges), "to=active and to=passive before any change")
	require.Equal(t, 3, testutil.CollectAndCount(a.m.watchEnds), "dead, alive and unconfirmed before any watch ends")
	require.Zero(t, testutil.CollectAndCount(a.m.reaped))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { stop(); require.NoError(t, <-done) }()
	require.Eventually(t, func() bool { return testutil.CollectAndCount(a.m.reaped) == len(reasons) }, 5*time.Second, 5*time.Millisecond,
		"every reason for the app once scanned")
	require.Zero(t, reapedTotal(a), "the live node is not reaped")

	// A passive cleaner has them for its configured apps, so a reap in its
	// first scan after taking over is an increase too.
	b := newCleaner(t, srv.URL())
	configured, err := apps.New([]*apps.App{{ID: "other", Key: "k", Secret: "s", Enabled: true}})
	require.NoError(t, err)
	b.cfg.Apps = configured
	runB, stopB := context.WithCancel(ctx)
	doneB := make(chan error, 1)
	go func() { doneB <- b.Run(runB) }()
	defer func() { stopB(); require.NoError(t, <-doneB) }()
	require.Eventually(t, func() bool { return testutil.CollectAndCount(b.m.reaped) == len(reasons) }, 5*time.Second, 5*time.Millisecond,
		"the configured app's reap counters, while passive")
	require.Zero(t, testutil.ToFloat64(b.m.active))
}
