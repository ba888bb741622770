package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/admission"
	"github.com/headcount/headcount/pkg/announce"
	"github.com/headcount/headcount/pkg/appreload"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/cache"
	"github.com/headcount/headcount/pkg/config"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/dashboard"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lifecycle"
	"github.com/headcount/headcount/pkg/portcap"
	"github.com/headcount/headcount/pkg/ratelimit"
	"github.com/headcount/headcount/pkg/redisx"
	"github.com/headcount/headcount/pkg/webhook"
)

const (
	// readyInterval is how often /readyz's Redis ping runs, and its timeout.
	readyInterval = time.Second
	// shutdownTimeout bounds how long requests in flight may finish on stop.
	// API requests are single Redis reads, so a few seconds is plenty.
	shutdownTimeout = 5 * time.Second
	// headerTimeout bounds reading a request's headers (never more than
	// --read-timeout).
	headerTimeout = 10 * time.Second
)

// Options configures an App.
type Options struct {
	// Config is the parsed and validated configuration; Config.Apps must be set.
	Config config.HTTPAPI
	// Logger is the root logger; nil discards logs.
	Logger hclog.Logger
	// Registry receives the metrics and is served on /metrics; nil means a
	// fresh registry.
	Registry *prometheus.Registry
}

// App is a running HTTP API: its listeners are bound by New, served by Run.
type App struct {
	log  hclog.Logger
	apps *apps.Registry
	// reload keeps apps current; every request looks its app up anew.
	reload *appreload.Reloader
	rdb    redis.UniversalClient
	ks     keyspace.Space // every Redis name this app uses
	store  *counts.Store
	// listings serves the listing, leaderboard and single-channel reads
	// with their freshness (listing.go).
	listings *counts.Listings
	metrics  *metrics
	// bus publishes events to the nodes; publish-only, so it needs no Run.
	bus *fanout.Bus
	// cache keeps the last event of each cache channel, written with its
	// publish; no metrics here (hits and misses are the wsnodes').
	cache *cache.Store
	// gate is the admission gate of capacity-limited channels.
	gate *admission.Gate
	// announce reports gate calls: metrics, admission webhooks, and a
	// notice to the nodes holding the channel's waiters.
	announce *announce.Announcer
	// limiter holds the apps' per-second budgets of publishes and reads.
	limiter *ratelimit.Limiter
	// hooks delivers the apps' webhooks from their event logs.
	hooks *webhook.Deliverer
	// audits caches GET .../audit per app (status.go).
	audits auditCache
	// dash is what the dashboard and the demo room (/dashboard, /demo) are
	// served with; nil without --dashboard.
	dash *dashboard.Options
	// routes is the whole API; the dashboard's handlers call it in-process.
	routes http.Handler

	api   *lifecycle.Server
	admin *lifecycle.Server // nil when --admin-addr is empty
	// maxConns caps the connections open on api (0: no cap).
	maxConns int

	redisUp  lifecycle.Readiness
	draining atomic.Bool

	life lifecycle.State
}

// New binds the API and admin listeners and builds the Redis client. Nothing
// dials Redis until Run.
func New(opts Options) (_ *App, err error) {
	if opts.Config.Apps == nil {
		return nil, errors.New("httpapi: no apps configured (Config.Apps is nil)")
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	lifecycle.WarnIgnoredAppFields(log.Named("httpapi"), opts.Config.Apps)
	a := &App{
		log:  log.Named("httpapi"),
		apps: opts.Config.Apps,
	}
	if opts.Config.Dashboard {
		a.dash = &dashboard.Options{
			// a.routes is set below, from a handler that includes these routes.
			API:  http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.routes.ServeHTTP(w, r) }),
			Apps: a.apps,
			// Only an unknown id is looked up: the dashboard shows a
			// disabled app too.
			Lookup: func(ctx context.Context, id string) *apps.App {
				if app := a.apps.ByID(id); app != nil {
					return app
				}
				return a.app(ctx, id, "")
			},
			DemoWS: opts.Config.DemoWS,
			Hosts:  dashboardHosts(opts.Config),
			Logger: a.log,
		}
	}
	a.metrics = newMetrics(reg, func() float64 {
		if a.api == nil { // New failed before listening; nobody scrapes
			return 0
		}
		return float64(a.api.Open())
	}, a.ready)
	defer func() {
		if err != nil {
			a.life.Stop()
		}
	}()

	common := opts.Config.Common
	common.RedisLogger, common.RedisRegisterer = a.log, reg // the Redis files' reloads
	if a.rdb, err = redisx.NewClient(common); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	a.life.Defer(func() { _ = a.rdb.Close() })
	a.ks = keyspace.New(opts.Config.RedisPrefix)
	a.store = counts.NewStore(a.rdb, a.ks)
	a.store.SliceSize = opts.Config.SliceSize
	a.listings = counts.NewListings(a.rdb, counts.ListingOptions{
		Keyspace:   a.ks,
		StaleAfter: opts.Config.StaleAfter,
		CacheTTL:   opts.Config.ListingCacheTTL,
		LockTTL:    opts.Config.ListingLockTTL,
	})
	a.bus = fanout.New(a.rdb, fanout.Options{Keyspace: a.ks, Logger: a.log, Registerer: reg,
		History: history.New(a.rdb, history.Options{Keyspace: a.ks, Budget: opts.Config.HistoryBudget(), Logger: a.log, Registerer: reg})})
	a.cache = cache.New(a.rdb, cache.Options{Keyspace: a.ks})
	a.gate = admission.New(a.rdb, a.ks)
	a.announce = announce.New(announce.Options{Apps: a.apps, Bus: a.bus, Redis: a.rdb, Keyspace: a.ks, Metrics: admission.NewMetrics(reg), Logger: a.log})
	a.limiter = ratelimit.New(a.rdb, ratelimit.Options{Keyspace: a.ks, Metrics: ratelimit.NewMetrics(reg), Logger: a.log})
	a.hooks = webhook.New(a.rdb, webhook.Options{Keyspace: a.ks, Apps: a.apps, Replica: replicaName(), Logger: a.log, Registerer: reg})
	a.reload = appreload.New(opts.Config.Common, a.log, reg)

	a.routes = a.handler()
	a.maxConns = a.connCap(opts.Config.MaxConnections, redisConns(a.rdb, opts.Config.Common))
	a.metrics.maxConns.Set(float64(a.maxConns))
	if a.api, err = lifecycle.ListenCapped(opts.Config.Addr, a.routes, apiTimeouts(opts.Config), portcap.Config{
		Max: a.maxConns, Setting: "--max-connections", Logger: a.log, OnEvent: a.metrics.connEvent}); err != nil {
		return nil, fmt.Errorf("httpapi: listen on --addr %s: %w", opts.Config.Addr, err)
	}
	a.life.Defer(a.api.Close)
	warnPublic := func(apps.Diff) { lifecycle.WarnPublicSecrets(a.log, a.apps, "--addr", a.api.Addr()) }
	warnPublic(apps.Diff{})
	a.reload.OnChange = warnPublic
	if opts.Config.AdminAddr != "" {
		if a.admin, err = lifecycle.Listen(opts.Config.AdminAddr, lifecycle.AdminMux(reg, a.ready), lifecycle.AdminTimeouts); err != nil {
			return nil, fmt.Errorf("httpapi: listen on --admin-addr %s: %w", opts.Config.AdminAddr, err)
		}
		a.life.Defer(a.admin.Close)
	}
	return a, nil
}

// dashboardHosts are the names the dashboard answers to besides IP
// addresses and localhost names: --dashboard-hosts and the host of --addr.
func dashboardHosts(c config.HTTPAPI) []string {
	hosts := c.DashboardHostList()
	if h, _, err := net.SplitHostPort(c.Addr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return hosts
}

// apiTimeouts are the API port's connection timeouts, config's defaults
// for the ones c leaves zero.
func apiTimeouts(c config.HTTPAPI) lifecycle.Timeouts {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return lifecycle.Timeouts{
		Header: headerTimeout,
		Read:   or(c.ReadTimeout, config.DefaultReadTimeout),
		Write:  or(c.WriteTimeout, config.DefaultWriteTimeout),
		Idle:   or(c.IdleTimeout, config.DefaultIdleTimeout),
	}
}

// connCap is the cap on connections open on the API port: set
// (--max-connections) if positive, else derived from the open-file limit
// leaving room for redis connections (no cap where there is no limit). A
// cap above the derived one is kept, with a warning: it leaves the
// process's other files less room than the default.
func (a *App) connCap(set, redis int) int {
	limit, ok := config.OpenFileLimit()
	if set <= 0 {
		if !ok {
			return 0
		}
		return config.MaxConnectionsFor(limit, redis)
	}
	if ok && set > config.MaxConnectionsFor(limit, redis) {
		a.log.Warn("--max-connections leaves less room for Redis connections and the admin port than the open-file limit calls for",
			"max_connections", set, "open_file_limit", limit, "redis_connections", redis, "default", config.MaxConnectionsFor(limit, redis))
	}
	return set
}

// redisConns is the most connections rdb may hold open at once, which the
// API port's default cap leaves room for. Every part of the app (counts,
// listings, the bus, the cache, admission, rate limits, webhooks) shares
// rdb, so it is rdb's pools: per Redis server, the pool (go-redis's
// default: 10 per CPU; 5 on a Cluster node) and, but on a Cluster, the
// pipeline pool (10); in Sentinel mode the client of the sentinels too,
// with a pool as large and a pub/sub connection. A Cluster counts as
// max(its seeds, 3) nodes: with more, set --max-connections.
func redisConns(rdb redis.UniversalClient, c config.Common) int {
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		o := r.Options()
		return o.PoolSize * max(len(o.Addrs), 3)
	case *redis.Client:
		o := r.Options()
		n := o.PoolSize
		switch {
		case o.PipelinePoolSize == 0:
			n += redis.DefaultPipelinePoolSize
		case o.PipelinePoolSize > 0:
			n += o.PipelinePoolSize
		}
		if c.RedisMode() == config.RedisSentinel {
			n += o.PoolSize + 1
		}
		return n
	}
	return 0
}

// replicaName names this process among the webhook deliverers: unique per
// process start, and readable in XINFO CONSUMERS.
func replicaName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), rand.Uint32())
}

// Addr is the API's bound address (useful with --addr 127.0.0.1:0).
func (a *App) Addr() string { return a.api.Addr() }

// AdminAddr is the admin server's bound address, or "" when it is off.
func (a *App) AdminAddr() string {
	if a.admin == nil {
		return ""
	}
	return a.admin.Addr()
}

// ready is what /readyz reports.
func (a *App) ready() bool { return a.redisUp.Ready() && a.apps.Loaded() && !a.draining.Load() }

// Run serves until ctx is done or Stop is called, then stops accepting,
// lets requests in flight finish, and releases everything New acquired. It
// returns nil on a clean stop, or the error that stopped it. It keeps the
// promises of lifecycle.Service: after Stop it returns nil at once, and a
// second Run fails.
func (a *App) Run(ctx context.Context) error {
	if err := a.life.Run(ctx, a.run); err != nil {
		return fmt.Errorf("httpapi: %w", err)
	}
	return nil
}

func (a *App) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.log.Info("serving", "addr", a.Addr(), "admin_addr", a.AdminAddr(), "apps", len(a.apps.All()), "max_connections", a.maxConns)

	var g run.Group
	g.Add(func() error {
		<-ctx.Done()
		return nil
	}, func(error) { cancel() })
	g.Add(func() error {
		a.watchRedis(ctx)
		return nil
	}, func(error) { cancel() })
	g.Add(func() error {
		return a.hooks.Run(ctx)
	}, func(error) { cancel() })
	g.Add(func() error {
		return a.reload.Run(ctx)
	}, func(error) { cancel() })
	g.Add(func() error {
		if err := a.api.Serve(); err != nil {
			return fmt.Errorf("serve api: %w", err)
		}
		return nil
	}, func(error) {
		// Not ready first, so a load balancer stops sending before we stop
		// accepting; the admin server (added after) stays up meanwhile.
		a.draining.Store(true)
		a.api.Shutdown(shutdownTimeout)
	})
	if a.admin != nil {
		g.Add(func() error {
			if err := a.admin.Serve(); err != nil {
				return fmt.Errorf("serve admin: %w", err)
			}
			return nil
		}, func(error) { a.admin.Shutdown(shutdownTimeout) })
	}
	err := g.Run()
	a.log.Info("stopped")
	return err
}

// Stop makes Run return; it is idempotent and safe from any goroutine. If Run
// was never called it releases what New acquired.
func (a *App) Stop() { a.life.Stop() }

// watchRedis pings Redis every readyInterval until ctx ends, keeping
// readiness and the redis_up gauge current and logging each change.
func (a *App) watchRedis(ctx context.Context) {
	t := time.NewTicker(readyInterval)
	defer t.Stop()
	known := false // unknown at start: log the first result either way
	for {
		pctx, cancel := context.WithTimeout(ctx, readyInterval)
		err := redisx.Ping(pctx, a.rdb)
		cancel()
		if ctx.Err() != nil {
			return
		}
		up := err == nil
		if !up {
			a.metrics.redisErrors.Inc()
		}
		// Readiness changes before the line that says so: whoever acts on
		// "ready" (a test, an operator) finds /up answering 200.
		changed := !known || up != a.redisUp.Ready()
		a.redisUp.Set(up)
		if changed {
			if up {
				a.log.Info("redis is reachable: ready")
			} else {
				a.log.Warn("redis is unreachable: not ready", "error", err)
			}
			known = true
		}
		if up {
			a.metrics.redisUp.Set(1)
		} else {
			a.metrics.redisUp.Set(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
