package cleaner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/announce"
	"github.com/headcount/headcount/pkg/appreload"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lease"
	"github.com/headcount/headcount/pkg/lifecycle"
	"github.com/headcount/headcount/pkg/redisx"
	"github.com/headcount/headcount/pkg/webhook"
)

// reapBatch bounds how many stale nodes of one app one scan reaps, so a
// mass failure is worked off over a few scans without one long pass.
const reapBatch = 100

// DefaultAuditInterval is how often the active cleaner audits one app (the
// next one, in turn): low enough that the audit script, which holds the
// app's shard for time linear in the app's counts, stays a small fraction
// of Redis's time.
const DefaultAuditInterval = 5 * time.Second

// Options configure a cleaner.
type Options struct {
	Config   config.Cleaner
	Logger   hclog.Logger
	Registry *prometheus.Registry
	// AuditInterval is how often the active cleaner audits one app's counts
	// (apps take turns); 0 means DefaultAuditInterval, negative turns the
	// continuous audit off.
	AuditInterval time.Duration
}

// App is a running cleaner.
type App struct {
	cfg   config.Cleaner
	log   hclog.Logger
	rdb   redis.UniversalClient
	store *counts.Store
	// ann tells the surviving nodes' subscribers and the app's webhooks
	// what a reap changed, as the dead node's sockets' leaving would have.
	ann   *announce.Announcer
	lease *lease.Lease // nil with --lease-ttl 0: always active
	// reload keeps cfg.Apps current.
	reload *appreload.Reloader
	admin  *lifecycle.Server
	ready  lifecycle.Readiness
	m      *metrics
	life   lifecycle.State

	auditEvery time.Duration // <= 0: no continuous audit

	canary *counts.Liveness // nil with --liveness-interval 0
	// seenLive: nodes this cleaner saw holding a liveness subscription, and
	// when. Only those, and nodes that recorded a confirmed subscription
	// with their node-level last-seen, are reaped by the liveness check: a
	// node that never subscribed waits for dead-after (and one that
	// records no node-level last-seen, a build from before it during a
	// rolling upgrade, is never looked at).
	liveMu   sync.Mutex // guards seenLive for tests; one goroutine writes it
	seenLive map[string]time.Time
	// missing: nodes a trusted check found without a subscription, and
	// which check first did. A node is reaped only by a later check that
	// finds it so again, with no check seeing it subscribed in between, so
	// a connection that is replaced (a node reconnecting after a blip,
	// whose new subscription lands within one interval) does not get it
	// reaped.
	missing map[string]int
	checks  int // liveness checks so far
}

// Reasons a node is reaped, as logged and in the reaped_nodes_total metric.
const (
	reasonHeartbeat = "heartbeat_stale"   // last-seen older than dead-after
	reasonClosed    = "connection_closed" // liveness subscription gone, last-seen older than the grace
	reasonWatch     = "watch_ended"       // its watch ended and its liveness subscription is gone (watch.go)
)

// reasons are every reason, each counted from 0.
var reasons = []string{reasonHeartbeat, reasonClosed, reasonWatch}

// livenessTrustAfter is how long the cleaner's own liveness subscription
// must have held before missing node subscriptions are believed: when the
// liveness shard restarts, fails over or moves its slot, every subscription
// goes at once, and the nodes, which retry at least every 500 ms, resubscribe
// about when this cleaner does (all wait for the same master).
const livenessTrustAfter = time.Second

type metrics struct {
	active  prometheus.Gauge
	reaped  *prometheus.CounterVec
	scans   *prometheus.CounterVec
	lastRun prometheus.Gauge

	announceErrors prometheus.Counter

	drift        *prometheus.GaugeVec
	audits       *prometheus.CounterVec
	nodesAlive   *prometheus.GaugeVec
	reapLatency  prometheus.Histogram
	watchReap    prometheus.Histogram
	leaseChanges *prometheus.CounterVec

	watched   prometheus.Gauge
	watchEnds *prometheus.CounterVec

	// reapCounted: apps whose reaped counters exist, under reapMu.
	reapMu      sync.Mutex
	reapCounted map[string]bool
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		active: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_cleaner_active",
			Help: "1 while this cleaner holds the lease and scans, else 0.",
		}),
		reaped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_cleaner_reaped_nodes_total",
			Help: "Dead wsnodes whose counts this cleaner removed, by app and reason: heartbeat_stale (last-seen older than dead-after), connection_closed (its Redis connection closed and last-seen older than the liveness grace) or watch_ended (this cleaner's watch of its admin port ended and its Redis connection had closed).",
		}, []string{"app", "reason"}),
		scans: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_cleaner_scans_total",
			Help: "Scans for dead nodes, by result.",
		}, []string{"result"}),
		lastRun: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_cleaner_last_scan_timestamp_seconds",
			Help: "When the last successful scan finished.",
		}),
		announceErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "headcount_cleaner_announce_errors_total",
			Help: "Events about reaped nodes (member_removed, subscription_count) that could not be published.",
		}),
		drift: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_cleaner_count_drift",
			Help: "Global count entries (channels, presence members, connections) and bad contribution fields that differed from the sum of the registered nodes' contributions at the app's last audit; 0 is healthy. Exported by the active cleaner only.",
		}, []string{"app"}),
		audits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_cleaner_audits_total",
			Help: "Audits of one app's counts by the active cleaner, by result (clean, drift, error).",
		}, []string{"result"}),
		nodesAlive: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headcount_cleaner_nodes_alive",
			Help: "Registered wsnodes seen within dead-after at the last scan, by app. Exported by the active cleaner only.",
		}, []string{"app"}),
		reapLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "headcount_cleaner_reap_latency_seconds",
			Help:    "Time from a reaped node's last heartbeat to its reaping, by the Redis clock (at least dead-after, or the liveness grace for a node whose connection closed).",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 10),
		}),
		watchReap: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "headcount_cleaner_watch_reap_seconds",
			Help:    "Time from the end of a watch of a wsnode to the moment reads leave out its counts (its reap's first unit, per app), for a node then confirmed dead: the cleaner's share of a killed node's time to exact counts.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12),
		}),
		leaseChanges: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_cleaner_lease_changes_total",
			Help: "Times this cleaner became the lease holder (to=active) or stopped being it (to=passive); summed over cleaners, to=active counts holder changes.",
		}, []string{"to"}),
		watched: f.NewGauge(prometheus.GaugeOpts{
			Name: "headcount_cleaner_watched_nodes",
			Help: "wsnodes whose admin port this cleaner holds a GET /liveness open on, to learn of their death at once. Only the active cleaner watches.",
		}),
		watchEnds: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_cleaner_watch_ends_total",
			Help: "Watches of a wsnode that ended, or could not be made (connection refused or reset), by what Redis then said: dead (its liveness subscription was gone: reaped at once), alive (still subscribed: the network path broke, nothing reaped) or unconfirmed (Redis could not tell: left to the liveness check and dead-after).",
		}, []string{"result"}),
		reapCounted: map[string]bool{},
	}
	for _, r := range []string{watchDead, watchAlive, watchUnconfirmed} {
		m.watchEnds.WithLabelValues(r)
	}
	// Counters exist at 0 before their first change, so alerts see that
	// change as an increase (a series born at 1 is not one).
	for _, to := range []string{"active", "passive"} {
		m.leaseChanges.WithLabelValues(to)
	}
	return m
}

// countReaps makes app's reaped counters exist, at 0 until a reap. Scans
// may run at once (two active cleaners in one process, in tests).
func (m *metrics) countReaps(app string) {
	m.reapMu.Lock()
	defer m.reapMu.Unlock()
	if m.reapCounted[app] {
		return
	}
	m.reapCounted[app] = true
	for _, reason := range reasons {
		m.reaped.WithLabelValues(app, reason)
	}
}

// New wires a cleaner; it binds the admin listener but dials nothing. A
// nil Logger discards logs; a nil Registry means a fresh one.
func New(opts Options) (_ *App, err error) {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	common := opts.Config.Common
	common.RedisLogger, common.RedisRegisterer = log.Named("cleaner"), reg // the Redis files' reloads
	rdb, err := redisx.NewClient(common)
	if err != nil {
		return nil, err
	}
	ks := keyspace.New(opts.Config.RedisPrefix)
	a := &App{
		cfg:   opts.Config,
		log:   log.Named("cleaner"),
		rdb:   rdb,
		store: counts.NewStore(rdb, ks),
		m:     newMetrics(reg),

		auditEvery: opts.AuditInterval,
	}
	a.store.SliceSize = opts.Config.SliceSize
	a.reload = appreload.New(opts.Config.Common, a.log, reg)
	a.life.Defer(func() { _ = rdb.Close() })
	lifecycle.WarnIgnoredAppFields(a.log, opts.Config.Apps)
	defer func() {
		if err != nil {
			a.life.Stop() // releases what was taken so far
		}
	}()
	a.ann = announce.New(announce.Options{
		Apps:           opts.Config.Apps,
		Bus:            fanout.New(rdb, fanout.Options{Keyspace: ks, Logger: log, Registerer: reg}),
		Redis:          rdb,
		Keyspace:       ks,
		Gate:           admission.New(rdb, ks),
		Logger:         a.log,
		OnPublishError: a.m.announceErrors.Inc,
	})
	if opts.Config.LeaseTTL > 0 {
		a.lease = lease.NewNamed(rdb, lease.CleanerKey(ks), opts.Config.LeaseTTL, opts.Config.NodeID)
	}
	// A reap appends what it vacated and removed to the webhook log of apps
	// that ask for it (each slice in its own atomic unit), so a node's death
	// sends the webhooks its sockets' leaving would have.
	a.store.LogEvents = func(app string) eventlog.Spec { return webhook.LogSpec(opts.Config.Apps.ByID(app)) }
	if a.auditEvery == 0 {
		a.auditEvery = DefaultAuditInterval
	}
	if opts.Config.LivenessInterval > 0 {
		a.canary = counts.NewCanary(rdb, ks, config.NewNodeID(), time.Second, a.log)
		a.seenLive = map[string]time.Time{}
		a.missing = map[string]int{}
	}
	if opts.Config.AdminAddr != "" {
		if a.admin, err = lifecycle.Listen(opts.Config.AdminAddr, lifecycle.AdminMux(reg, a.ready.Ready), lifecycle.AdminTimeouts); err != nil {
			return nil, fmt.Errorf("admin listener: %w", err)
		}
		a.life.Defer(a.admin.Close)
	}
	return a, nil
}

// AdminAddr is the bound admin address ("" when disabled).
func (a *App) AdminAddr() string {
	if a.admin == nil {
		return ""
	}
	return a.admin.Addr()
}

// Run contends for the lease and scans while active, until ctx ends or
// Stop is called, then releases what New took. It keeps the promises of
// lifecycle.Service: after Stop it returns nil at once, and a second Run
// fails.
func (a *App) Run(ctx context.Context) error {
	err := a.life.Run(ctx, a.run)
	if errors.Is(err, lifecycle.ErrRunTwice) {
		return fmt.Errorf("cleaner: %w", err)
	}
	return err
}

// Stop makes Run return; it is idempotent, safe from any goroutine and
// does not wait. Before Run it releases the admin listener and the Redis
// client New took.
func (a *App) Stop() { a.life.Stop() }

// appsLoaded waits until the apps are loaded (a database's may not be
// yet), reporting false if ctx ended first. A reap logs the webhooks of the
// apps it finds, so a cleaner that does not know them takes no part.
func (a *App) appsLoaded(ctx context.Context) bool {
	if a.cfg.Apps == nil {
		return true // nothing to know (tests without apps)
	}
	for {
		changed := a.cfg.Apps.Changed()
		if a.cfg.Apps.Loaded() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

func (a *App) run(ctx context.Context) error {
	var g run.Group
	ctx, cancel := context.WithCancel(ctx)
	g.Add(func() error { return a.reload.Run(ctx) }, func(error) { cancel() })
	if a.lease == nil {
		a.log.Warn("NO LEASE (--lease-ttl 0): this cleaner is ALWAYS ACTIVE, alongside any other cleaner; for tests only, never in production")
		g.Add(func() error {
			if !a.appsLoaded(ctx) {
				return nil
			}
			a.m.active.Set(1)
			defer a.m.active.Set(0)
			a.active(ctx, func() bool { return true })
			return nil
		}, func(error) { cancel() })
	} else {
		g.Add(func() error {
			if !a.appsLoaded(ctx) {
				return nil
			}
			// While passive, so that a reap in the first scan after taking
			// the lease over is an increase too; before e.Run, which scans.
			if a.cfg.Apps != nil {
				for _, app := range a.cfg.Apps.All() {
					a.m.countReaps(app.ID)
				}
			}
			e := &lease.Elector{Lease: a.lease, Log: a.log, OnChange: func(active bool) {
				a.m.active.Set(map[bool]float64{true: 1}[active])
				a.m.leaseChanges.WithLabelValues(map[bool]string{true: "active", false: "passive"}[active]).Inc()
			}}
			return e.Run(ctx, func(ctx context.Context) { a.active(ctx, a.lease.Valid) })
		}, func(error) { cancel() })
	}
	// Announcing has a goroutine of its own, as on a wsnode, so a slow bus
	// never delays the next reap; what a reap queued before a stop still
	// goes out, within a second.
	g.Add(func() error {
		a.ann.Run(ctx)
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		defer dcancel()
		a.ann.Drain(dctx)
		return nil
	}, func(error) { cancel() })
	g.Add(func() error { a.watchRedis(ctx); return nil }, func(error) { cancel() })
	if a.canary != nil {
		// Held while passive too, so a cleaner that becomes active can
		// trust the liveness check at once.
		g.Add(func() error { a.canary.Run(ctx); return nil }, func(error) { cancel() })
	}
	if a.admin != nil {
		g.Add(a.admin.Serve, func(error) { a.admin.Shutdown(time.Second) })
	}
	a.log.Info("cleaner started", "node_id", a.cfg.NodeID, "dead_after", a.cfg.DeadAfter, "scan_interval", a.cfg.ScanInterval, "lease_ttl", a.cfg.LeaseTTL,
		"liveness_interval", a.cfg.LivenessInterval, "liveness_grace", a.cfg.LivenessGrace)
	err := g.Run()
	a.log.Info("cleaner stopped")
	return err
}

// watchRedis keeps /readyz true while Redis answers, for passive cleaners too.
func (a *App) watchRedis(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		a.ready.Set(redisx.Ping(pctx, a.rdb) == nil)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// active scans every scan-interval, and audits one app every audit
// interval, while this cleaner holds the lease; held says whether it
// still does.
func (a *App) active(ctx context.Context, held func() bool) {
	// A passive cleaner does not look, so it must not export what it saw
	// while active: dashboards would add two cleaners' stale gauges.
	defer a.m.drift.Reset()
	defer a.m.nodesAlive.Reset()
	if a.auditEvery > 0 {
		var wg sync.WaitGroup
		defer wg.Wait()
		// Its own goroutine: a long audit of a large app must not delay
		// the reaping of dead nodes.
		wg.Go(func() { a.auditLoop(ctx) })
	}
	if a.canary != nil {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { a.livenessLoop(ctx, held) })
		wg.Go(func() { a.watchLoop(ctx, held) })
	}
	t := time.NewTicker(a.cfg.ScanInterval)
	defer t.Stop()
	failing := false // log a run of failures once, and its end
	for {
		err := a.scan(ctx, held)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			a.m.scans.WithLabelValues("error").Inc()
			if !failing {
				a.log.Warn("scan failed; retrying every scan interval", "error", err)
			}
			failing = true
		default:
			a.m.scans.WithLabelValues("ok").Inc()
			a.m.lastRun.SetToCurrentTime()
			if failing {
				a.log.Info("scans succeed again")
			}
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scan reaps every stale node of every app, checking held() before each
// reap so a cleaner that lost its lease stops at once.
func (a *App) scan(ctx context.Context, held func() bool) error {
	apps, err := a.store.Apps(ctx)
	if err != nil {
		return err
	}
	for _, app := range apps {
		nodes, err := a.store.Nodes(ctx, app, a.cfg.DeadAfter)
		if err != nil {
			return err
		}
		a.m.nodesAlive.WithLabelValues(app).Set(float64(nodes.Alive()))
		a.m.countReaps(app)
		if nodes.Reaping > 0 && held() {
			// Reaps left half done by a cleaner (or a stopping node)
			// that stopped: the globals still hold what is left of them.
			// One still under way elsewhere (a node's graceful removal)
			// is drained by both: each field once, each edge announced
			// by whoever subtracted it; one this cleaner's liveness
			// check is draining is left to it.
			if err := a.finishReaps(ctx, app); err != nil {
				return err
			}
		}
		if nodes.Stale == 0 {
			continue // the common case costs one O(log nodes) read per app
		}
		stale, err := a.store.StaleNodes(ctx, app, a.cfg.DeadAfter, reapBatch)
		if err != nil {
			return err
		}
		for _, node := range stale {
			if !held() || ctx.Err() != nil {
				return nil
			}
			if _, err := a.reap(ctx, app, node, reasonHeartbeat, a.cfg.DeadAfter, time.Time{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// reap reaps node of app, for reason, if its last-seen there is still at
// least age old (dead-after, the liveness grace, or the time since its
// watch ended), in the reap's slices, and
// announces what that changed: member_removed and the seats' grace for
// members whose last socket it held, and new subscription counts (socket
// event and webhook) where the app asks for them. The occupancy webhooks
// (channel_vacated, member_removed) are in the reap's units already. spared
// says it did not reap: the node wrote within the age (or another cleaner
// reaped it first). watchEnded, for a reap a watch's end started, is when
// it ended (headcount_cleaner_watch_reap_seconds); zero for the others.
func (a *App) reap(ctx context.Context, app, node, reason string, age time.Duration, watchEnded time.Time) (spared bool, err error) {
	ok, reaped, err := a.store.ReapNode(ctx, app, node, age)
	if !ok {
		return true, err
	}
	// The reap is a sequence of units: one that failed half-way has
	// subtracted part of the node, which is announced now; the next scan
	// finishes the rest (finishReaps).
	a.m.reaped.WithLabelValues(app, reason).Inc()
	a.m.reapLatency.Observe(reaped.SinceSeen.Seconds())
	if !watchEnded.IsZero() {
		a.m.watchReap.Observe(reaped.Exact.Sub(watchEnded).Seconds())
	}
	a.log.Info("reaped dead node", "app", app, "node", node, "reason", reason, "fields", reaped.Fields, "channels", len(reaped.Channels),
		"vacated", len(reaped.Vacated()), "members_removed", len(reaped.Members), "since_seen", reaped.SinceSeen, "dead_after", a.cfg.DeadAfter)
	a.ann.Flushed(reaped.Edges)
	return false, err
}

// finishReaps drains app's reaps that were left half done (or are under
// way elsewhere), and announces what its own slices changed.
func (a *App) finishReaps(ctx context.Context, app string) error {
	done, err := a.store.FinishReaps(ctx, app)
	for node, reaped := range done {
		a.log.Info("drained a reap left half done or under way", "app", app, "node", node, "fields", reaped.Fields, "channels", len(reaped.Channels),
			"vacated", len(reaped.Vacated()), "members_removed", len(reaped.Members))
		a.ann.Flushed(reaped.Edges)
	}
	return err
}

// livenessLoop runs checkLiveness every liveness interval while active.
func (a *App) livenessLoop(ctx context.Context, held func() bool) {
	t := time.NewTicker(a.cfg.LivenessInterval)
	defer t.Stop()
	failing := false
	for {
		if err := a.checkLiveness(ctx, held); err != nil && ctx.Err() == nil {
			if !failing {
				a.log.Warn("liveness check failed; dead nodes wait for dead-after until it succeeds", "error", err)
			}
			failing = true
		} else if failing && ctx.Err() == nil {
			a.log.Info("liveness checks succeed again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkLiveness reaps the nodes whose liveness subscription vanished and
// whose last-seen is at least the liveness grace old. Its cost does not
// grow with the number of apps: one script on the liveness shard finds the
// nodes whose node-level last-seen (counts.Store.LivenessCandidates) is past
// the grace, and, when there are some, one PUBSUB NUMSUB (SHARDNUMSUB on
// Cluster) names them: two round trips, O(log nodes + candidates) work in
// Redis. Only a node found dead goes per app (counts.Store.AppsOf, one
// ZSCORE per app, sent with the apps' listing), and a reap costs what a heartbeat-stale reap costs.
func (a *App) checkLiveness(ctx context.Context, held func() bool) error {
	candidates, err := a.store.LivenessCandidates(ctx, a.cfg.LivenessGrace, a.cfg.DeadAfter, livenessBatch)
	if err != nil {
		return err
	}
	a.checks++
	a.liveMu.Lock()
	defer a.liveMu.Unlock()
	now := time.Now()
	for n, at := range a.seenLive {
		if now.Sub(at) > time.Minute {
			delete(a.seenLive, n)
		}
	}
	for n, first := range a.missing {
		if a.checks-first > 600 { // a minute at the default interval
			delete(a.missing, n)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	nodes := make([]string, len(candidates))
	for i, c := range candidates {
		nodes[i] = c.Node
	}
	live, dead, trusted, err := a.store.Liveness(ctx, a.canary, livenessTrustAfter, nodes)
	if err != nil {
		return err
	}
	for _, n := range live {
		a.seenLive[n] = now
		delete(a.missing, n)
	}
	if !trusted {
		clear(a.missing)
		return nil
	}
	check := a.checks
	isDead := make(map[string]bool, len(dead))
	for _, n := range dead {
		first, was := a.missing[n]
		if !was {
			a.missing[n] = check
		}
		isDead[n] = was && first < check
	}
	for _, c := range candidates {
		if !isDead[c.Node] {
			continue
		}
		// Seen subscribed, by this cleaner or by the node itself (it
		// records a confirmed subscription with its last-seen): a node
		// that never held one is not dead for missing it.
		if _, was := a.seenLive[c.Node]; !was && !c.Subscribed {
			continue
		}
		if !held() || ctx.Err() != nil {
			return nil
		}
		apps, err := a.store.AppsOf(ctx, c.Node)
		if err != nil {
			return err
		}
		forgot, err := a.reapEverywhere(ctx, held, c, apps, reasonClosed, a.cfg.LivenessGrace, time.Time{})
		if err != nil {
			return err
		}
		if forgot {
			// A new subscription, should the node be alive, must be
			// missed by two checks again.
			delete(a.missing, c.Node)
		}
	}
	return nil
}

// livenessBatch bounds the nodes one liveness check looks at (oldest
// last-seen first): the deployment's nodes, not its apps.
const livenessBatch = 1000

// reapParallel is how many apps' reaps of one dead node are in flight at
// once: a node in thousands of apps is reaped in a fraction of the round
// trips' sum, and Redis still sees only a few scripts queued.
const reapParallel = 8

// reapEverywhere reaps the dead node c in each of apps, the apps it has a
// contribution in (Store.AppsOf), each reap re-checking atomically that
// its last-seen there is at least age old (a node that wrote since is
// spared), then forgets its node-level entry unless it wrote there since,
// and reports whether it did. If any app spared it, the node stays a candidate and the next
// check looks again: a dying node's last heartbeat reaches its apps one
// after another, so some may have been written after its node-level entry
// and be younger than the grace for a moment; forgetting the node then
// would leave those apps' counts to dead-after. A node that is alive
// resubscribes and stops being a candidate. watchEnded is as a.reap takes
// it.
func (a *App) reapEverywhere(ctx context.Context, held func() bool, c counts.Candidate, apps []string, reason string, age time.Duration, watchEnded time.Time) (forgot bool, err error) {
	sem := make(chan struct{}, reapParallel)
	errs := make(chan error, len(apps))
	var spared atomic.Bool
	var wg sync.WaitGroup
	for _, app := range apps {
		if !held() || ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, err := a.reap(ctx, app, c.Node, reason, age, watchEnded)
			if err != nil {
				errs <- err
			}
			if s {
				spared.Store(true)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return false, err // the node stays a candidate: the next check retries
	}
	if !held() || ctx.Err() != nil || spared.Load() {
		return false, nil
	}
	return a.store.ForgetNode(ctx, c.Node, c.Seen)
}
