package wsnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
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
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/exitorder"
	"github.com/headcount/headcount/pkg/fanout"
	"github.com/headcount/headcount/pkg/history"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lifecycle"
	"github.com/headcount/headcount/pkg/protocol"
	"github.com/headcount/headcount/pkg/ratelimit"
	"github.com/headcount/headcount/pkg/redisx"
	"github.com/headcount/headcount/pkg/resume"
	"github.com/headcount/headcount/pkg/webhook"
	"github.com/headcount/headcount/pkg/wsfront"
)

// Options configure a node.
type Options struct {
	// Config is the validated wsnode configuration; Config.Apps must be set.
	Config config.WSNode
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Registry receives the node's metrics and is served on /metrics;
	// nil means a fresh registry.
	Registry *prometheus.Registry
}

// tunables are limits with no flag yet; tests shorten them.
type tunables struct {
	// readLimit caps one client frame; larger ones close the socket (1009).
	readLimit int64
	// idleTimeout closes a socket that sent nothing for this long. pusher-js
	// pings after activity_timeout (120 s) of silence, so live clients are
	// never this quiet.
	idleTimeout time.Duration
	// writeTimeout closes a socket whose write is stuck (a client that does
	// not read).
	writeTimeout time.Duration
	// sweepEvery is the sweeper's period, and so the resolution of both timeouts.
	sweepEvery time.Duration
	// closeTimeout is how long the event loop's close handshake waits for
	// the client's close frame (coder/websocket waits 5 s, not settable).
	closeTimeout time.Duration
	// drainConcurrency bounds close handshakes in flight while draining.
	drainConcurrency int
	// drainGrace is how long after the drain window sockets get to finish
	// their close handshake before they are cut.
	drainGrace time.Duration
	// removeTimeout bounds removing this node's contribution at shutdown.
	removeTimeout time.Duration
	// coalesce is the recorder's coalescing window.
	coalesce time.Duration
	// redisTimeout bounds the Redis calls a socket's handler makes
	// (presence member lists, connection limits, publishing client events).
	redisTimeout time.Duration
	// frameBudget is frameBudget but in tests.
	frameBudget func(*apps.App) (rate, burst int64)
	// holdLimit bounds the live deliveries a replay of history holds for
	// one subscriber (replay.go).
	holdLimit int
	// checkpointEvery is how often resumable sockets' serials are saved,
	// and so the most a page resuming after this node's crash is sent
	// twice.
	checkpointEvery time.Duration
	// replayRead, if set (tests), runs between a replay's read of the
	// history and its sending.
	replayRead func(channel string)
}

func defaultTunables() tunables {
	return tunables{
		readLimit:        16 << 10,
		idleTimeout:      protocol.ActivityTimeout*time.Second + 60*time.Second,
		writeTimeout:     10 * time.Second,
		sweepEvery:       time.Second,
		closeTimeout:     5 * time.Second,
		drainConcurrency: 256,
		drainGrace:       5 * time.Second,
		removeTimeout:    5 * time.Second,
		coalesce:         5 * time.Millisecond,
		redisTimeout:     5 * time.Second,
		frameBudget:      frameBudget,
		holdLimit:        256,
		checkpointEvery:  time.Second,
	}
}

// App is one WebSocket node.
type App struct {
	cfg config.WSNode
	log hclog.Logger
	reg *prometheus.Registry
	m   *metrics
	// limits counts client events refused by the apps' rates, in the
	// metric httpapi counts its 429s in.
	limits *ratelimit.Metrics
	tun    tunables

	rdb redis.UniversalClient
	// reload keeps cfg.Apps current (applyApps acts on its changes).
	reload *appreload.Reloader
	rec    *counts.Recorder
	live   *counts.Liveness // see counts.NewNodeLiveness
	// liveDone is closed once live has released its subscription: the
	// cleaners' watches (GET /liveness) end then, not before.
	liveDone chan struct{}
	// advertised is where the cleaners watch this node ("" for nowhere).
	advertised string
	store      *counts.Store
	bus        *fanout.Bus
	// cache serves cache channels' last events to new subscribers.
	cache *cache.Store
	// resumes holds resumable pages' state, resumers this node's sockets
	// of such pages (replay.go).
	resumes  *resume.Store
	resumers resumers
	// resumeFrozen (tests) stops resume saves, as a crash would.
	resumeFrozen atomic.Bool
	index        *index
	send         *sender
	// woken is deliver's scratch list of the sockets it put on the ready
	// list; the bus never calls deliver concurrently (fanout.Bus.Run).
	woken []*socket
	// announce says what count changes and gate calls cause (member
	// events, subscription counts, the gate's leaves): the recorder's
	// flushes queue their edges on it, and Run announces them.
	announce *announce.Announcer
	// gate and waiters serve capacity-limited channels (admission.go).
	gate    *admission.Gate
	waiters *waiters
	// channels caps each app's occupied channels (appchannels.go).
	channels appChannels
	// hooks appends client events to the apps' webhook logs.
	hooks *webhook.Producer
	// closeSlots bounds close handshakes started by the node (closeAsync).
	closeSlots chan struct{}
	ws         port
	admin      *lifecycle.Server // nil when --admin-addr is empty
	hub        *hub
	ready      lifecycle.Readiness

	life lifecycle.State
}

// New binds the WebSocket and admin listeners and builds the Redis client
// and the counts recorder. It does not dial Redis; Run does, through the
// recorder.
func New(opts Options) (_ *App, err error) {
	cfg := opts.Config
	if cfg.Apps == nil {
		return nil, errors.New("wsnode: config has no apps")
	}
	a := &App{
		cfg:        cfg,
		log:        opts.Logger,
		reg:        opts.Registry,
		tun:        defaultTunables(),
		hub:        newHub(),
		index:      newIndex(),
		send:       newSender(),
		closeSlots: make(chan struct{}, closeSlots),
		liveDone:   make(chan struct{}),
	}
	if a.log == nil {
		a.log = hclog.NewNullLogger()
	}
	a.log = a.log.Named("wsnode")
	lifecycle.WarnIgnoredAppFields(a.log, cfg.Apps)
	if a.reg == nil {
		a.reg = prometheus.NewRegistry()
	}
	a.m = newMetrics(a.reg, func() float64 {
		if a.ws == nil { // New failed before listening; nobody scrapes
			return 0
		}
		return float64(a.ws.Open())
	}, a.Ready, func() bool { return cfg.ExitAnchor && exitorder.Anchored() })
	a.limits = ratelimit.NewMetrics(a.reg)

	defer func() {
		if err != nil {
			a.life.Stop() // releases what was bound so far
		}
	}()

	maxSockets := a.socketCap()
	// The connections that tell the cleaners of this process's death
	// (Redis's, the admin port's) go above every client socket, so a
	// kill closes them first, not after the client sockets; Redis's above
	// the admin port's, so the liveness subscription closes before a
	// cleaner's watch ends and the cleaner asks Redis.
	limit, _ := config.OpenFileLimit()
	orderLog := a.log.Named("exitorder")
	first := exitorder.New(maxSockets, limit, orderLog)
	// Yet the kernel frees a killed process's memory and walks all of its
	// descriptors before it closes any (11-25 ms and 3 ms for a node of
	// 16,000 sockets); the anchor shuts those connections down as the node
	// dies, and its holder keeps the memory until the closes are done.
	if cfg.ExitAnchor {
		if pid, err := exitorder.StartAnchor("wsnode-anchor", "wsnode-memory", orderLog); err != nil {
			a.log.Info("no exit anchor: a killed node's connections close only once the kernel has freed its memory and walked its descriptors", "error", err)
		} else {
			a.log.Info("exit anchor started: child processes sharing this node's descriptors (wsnode-anchor) and memory (wsnode-memory), so a kill ends the node's Redis and admin connections at once", "anchor_pid", pid)
		}
	}
	common := cfg.Common
	common.RedisLogger, common.RedisRegisterer = a.log, a.reg // the Redis files' reloads
	if a.rdb, err = redisx.NewClient(common); err != nil {
		return nil, fmt.Errorf("wsnode: %w", err)
	}
	redisx.WrapConns(a.rdb, first.Above(adminDescriptors).Conn)
	a.life.Defer(func() { _ = a.rdb.Close() }) // Run closes it first, to report the error
	ks := keyspace.New(cfg.RedisPrefix)
	a.store = counts.NewStore(a.rdb, ks)
	a.store.SliceSize = cfg.SliceSize
	a.bus = fanout.New(a.rdb, fanout.Options{Keyspace: ks, Logger: a.log, Registerer: a.reg,
		History: history.New(a.rdb, history.Options{Keyspace: ks, Budget: cfg.HistoryBudget(), Logger: a.log, Registerer: a.reg})})
	a.cache = cache.New(a.rdb, cache.Options{Keyspace: ks, Registerer: a.reg})
	a.resumes = resume.New(a.rdb, ks)
	a.gate, a.waiters = admission.New(a.rdb, ks), newWaiters()
	a.hooks = webhook.NewProducer(a.rdb, ks, a.log, a.reg)
	a.announce = a.newAnnounce()
	if cfg.AdminAddr != "" {
		// Before the recorder, which registers the admin port's address.
		admin := lifecycle.AdminMux(a.reg, a.Ready)
		admin.Handle("/liveness", lifecycle.LivenessHandler(a.liveDone))
		if a.admin, err = lifecycle.Listen(cfg.AdminAddr, admin, lifecycle.AdminTimeouts); err != nil {
			return nil, fmt.Errorf("wsnode: listen --admin-addr %s: %w", cfg.AdminAddr, err)
		}
		a.admin.WrapListener(first.Listener)
		a.life.Defer(a.admin.Close)
	}
	a.advertised = a.advertise()
	a.live = counts.NewNodeLiveness(a.rdb, ks, a.cfg.NodeID, a.cfg.Heartbeat, a.log)
	a.rec = a.newRecorder(a.reg)
	a.reload = appreload.New(cfg.Common, a.log, a.reg)

	a.m.maxSockets.Set(float64(maxSockets))
	front := wsfront.Options{Handler: a.serveWS, Hijack: hijackSocket, MaxConns: maxSockets,
		Logger: a.log.Named("front"), OnRefuse: func(r wsfront.Reason) { a.m.errors[frontReason(r)].Inc() }, Up: a.Ready}
	if cfg.Transport == "" {
		cfg.Transport = config.DefaultTransport()
		a.cfg.Transport = cfg.Transport // as the serving log line says it
	}
	if cfg.Transport == config.TransportEventLoop {
		a.ws, err = a.listenLoop(cfg.Addr, front)
	} else {
		a.ws, err = wsfront.Listen(cfg.Addr, front)
	}
	if err != nil {
		return nil, fmt.Errorf("wsnode: listen --addr %s: %w", cfg.Addr, err)
	}
	a.life.Defer(func() { closeUnserved(a.ws) })
	warnPublic := func(apps.Diff) { lifecycle.WarnPublicSecrets(a.log, cfg.Apps, "--addr", a.ws.Addr()) }
	warnPublic(apps.Diff{})
	a.reload.OnChange = warnPublic

	return a, nil
}

// adminDescriptors is how many of the admin port's connections (the
// cleaners' watches, scrapes, probes) are placed below Redis's
// (exitorder.Placer.Above); past that they interleave, and a watch may
// end before Redis's liveness subscription closes, which the cleaner's
// confirmation then waits out.
const adminDescriptors = 128

// socketCap is the cap on connections open on the WebSocket port:
// --max-sockets if positive, else derived from the open-file limit (no cap
// where there is none). A cap above the derived one is kept, with a
// warning: it leaves the node's other files less room than the default.
func (a *App) socketCap() int {
	limit, ok := config.OpenFileLimit()
	if a.cfg.MaxSockets <= 0 {
		if !ok {
			return 0
		}
		return config.MaxSocketsFor(limit)
	}
	if ok && a.cfg.MaxSockets > config.MaxSocketsFor(limit) {
		a.log.Warn("--max-sockets leaves less room for Redis connections and the admin port than the open-file limit calls for",
			"max_sockets", a.cfg.MaxSockets, "open_file_limit", limit, "default", config.MaxSocketsFor(limit))
	}
	return a.cfg.MaxSockets
}

// writers is the size of the fixed writer pool (sender): --writers, or
// config.WritersFor the CPUs the runtime uses.
func (a *App) writers() int {
	if a.cfg.Writers > 0 {
		return a.cfg.Writers
	}
	return config.WritersFor(runtime.GOMAXPROCS(0))
}

// port is the WebSocket port: a wsfront.Front (the goroutine transport) or
// a wsfront.LoopFront (the event loop), which also has Close.
type port interface {
	Addr() string
	Open() int
	MaxConns() int
	// Serve accepts until Shutdown.
	Serve() error
	// Shutdown stops accepting and waits up to timeout for handshakes
	// under way; upgraded sockets are the node's to close.
	Shutdown(timeout time.Duration)
}

// closeUnserved releases the listener of a front that never served; after
// Run's drain it is closed already (Shutdown is idempotent). With no
// handshake under way, Shutdown returns at once rather than after timeout.
// A loop front's loops stop too (after the drain, no socket is left).
func closeUnserved(f port) {
	f.Shutdown(time.Second)
	if c, ok := f.(io.Closer); ok {
		_ = c.Close()
	}
}

// Addr is the WebSocket listener's address (host:port).
func (a *App) Addr() string { return a.ws.Addr() }

// AdminAddr is the admin listener's address, or "" without one.
func (a *App) AdminAddr() string {
	if a.admin == nil {
		return ""
	}
	return a.admin.Addr()
}

// newRecorder builds the node's counts recorder, its metrics on reg.
func (a *App) newRecorder(reg prometheus.Registerer) *counts.Recorder {
	return counts.NewRecorder(a.rdb, a.cfg.NodeID, counts.RecorderOptions{
		Keyspace:   keyspace.New(a.cfg.RedisPrefix),
		Heartbeat:  a.cfg.Heartbeat,
		Coalesce:   a.tun.coalesce,
		Logger:     a.log,
		Registerer: reg,
		OnFlushed:  a.announce.Flushed,
		LogEvents:  func(app string) eventlog.Spec { return webhook.LogSpec(a.cfg.Apps.ByID(app)) },
		Liveness:   a.live,
		Address:    a.advertised,
		SliceSize:  a.cfg.SliceSize,
	})
}

// newAnnounce builds the node's announcer: counts of busy channels
// throttled, held until this node's bus has joined their channels, their
// webhooks queued without blocking; a member's leave settles the gate when
// the seat may free.
func (a *App) newAnnounce() *announce.Announcer {
	return announce.New(announce.Options{
		Apps:           a.cfg.Apps,
		Bus:            a.bus,
		Redis:          a.rdb,
		Keyspace:       keyspace.New(a.cfg.RedisPrefix),
		Gate:           a.gate,
		Metrics:        admission.NewMetrics(a.reg),
		Logger:         a.log,
		Timeout:        a.tun.redisTimeout,
		Throttle:       true,
		WaitJoined:     true,
		OnLeft:         a.leftChannel,
		OnPublishError: func() { a.m.errors[reasonPublish].Inc() },
	})
}

// Ready reports what /readyz serves: true while the node accepts sockets,
// its counts reach Redis and its event fan-out is subscribed.
func (a *App) Ready() bool {
	return a.ready.Ready() && a.cfg.Apps.Loaded() && a.rec.Healthy() && a.bus.Healthy()
}

// Stop starts the same graceful shutdown as cancelling Run's context. It is
// idempotent and does not wait; Run returns when the drain is done. Before
// Run it releases the listeners and the Redis client New took.
func (a *App) Stop() { a.life.Stop() }

// Run serves until ctx ends or Stop is called, then drains: readiness off,
// listener closed, sockets closed with 4200 over the drain window, this
// node's contribution removed from Redis. It returns nil after a clean
// drain, or the first failure. It keeps the promises of lifecycle.Service:
// after Stop it returns nil at once, and a second Run fails.
func (a *App) Run(ctx context.Context) error {
	err := a.life.Run(ctx, a.run)
	if errors.Is(err, lifecycle.ErrRunTwice) {
		return fmt.Errorf("wsnode: %w", err)
	}
	return err
}

func (a *App) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	recCtx, stopRec := context.WithCancel(context.Background())
	defer stopRec()
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	defer stopSweep()
	busCtx, stopBus := context.WithCancel(context.Background())
	defer stopBus()
	annCtx, stopAnn := context.WithCancel(context.Background())
	defer stopAnn()
	liveCtx, stopLive := context.WithCancel(context.Background())
	defer stopLive()
	drained := make(chan struct{})
	var removeErr error

	var g run.Group
	// Sockets: serve until told to stop (or another actor fails), then drain.
	g.Add(func() error {
		// Writers outlive the drain: they stop once no handler is left.
		a.send.start(a.writers(), (*socket).flush)
		defer a.send.stop()
		errc := make(chan error, 1)
		go func() { errc <- a.ws.Serve() }()
		a.ready.Set(true)
		a.log.Info("serving", "addr", a.Addr(), "admin_addr", a.AdminAddr(), "node_id", a.cfg.NodeID, "max_sockets", a.ws.MaxConns(), "transport", a.cfg.Transport, "writers", a.writers())
		var err error
		served := false
		select {
		case <-ctx.Done():
		case err = <-errc:
			served = true
			if err == nil {
				err = errors.New("server stopped")
			}
			err = fmt.Errorf("wsnode: serve websockets: %w", err)
		}
		a.drain()
		close(drained)
		if !served {
			<-errc //nolint:errcheck // drain's Shutdown made Serve return; its error says only that
		}
		return err
	}, func(error) { cancel() })

	// Counts: flush and heartbeat until the sockets are drained, then remove
	// this node's contribution. Remove comes after the drain so no socket's
	// decrement can follow it.
	g.Add(func() error {
		err := a.rec.Run(recCtx)
		if recCtx.Err() == nil {
			if err == nil {
				err = errors.New("returned early")
			}
			err = fmt.Errorf("wsnode: counts recorder: %w", err)
			// The group interrupts the others only once an actor returns,
			// and this one still waits for the drain: start it here.
			cancel()
		}
		<-drained
		rctx, rcancel := context.WithTimeout(context.Background(), a.tun.removeTimeout)
		defer rcancel()
		// Flushing first reports the drained sockets' leaves as ordinary
		// edges; Remove then reports whatever was left.
		if ferr := a.rec.Flush(rctx); ferr != nil {
			a.log.Warn("final flush failed; Remove will take this node's counts out", "error", ferr)
		}
		if rerr := a.rec.Remove(rctx); rerr != nil {
			removeErr = fmt.Errorf("wsnode: remove this node's counts (the cleaner will reap them): %w", rerr)
		} else {
			a.log.Info("removed this node's counts", "node_id", a.cfg.NodeID)
		}
		// Announce the leaves (member_removed) to the other nodes.
		a.announce.Drain(rctx)
		// The liveness subscription goes last: the cleaner could otherwise
		// reap this node during its final flush and announce its leaves.
		stopLive()
		return err
	}, func(error) { stopRec() })

	// Liveness: held from the start (before any count is written) until
	// the counts actor has removed this node's contribution.
	g.Add(func() error {
		defer close(a.liveDone)
		a.live.Run(liveCtx)
		return nil
	}, func(error) {})

	g.Add(func() error {
		return a.reload.Run(sweepCtx)
	}, func(error) { stopSweep() })
	g.Add(func() error {
		a.watchApps(sweepCtx)
		return nil
	}, func(error) { stopSweep() })
	g.Add(func() error {
		a.checkpoints(sweepCtx)
		return nil
	}, func(error) { stopSweep() })

	g.Add(func() error {
		a.hub.sweep(sweepCtx, a.tun.sweepEvery, a.tun.idleTimeout, a.tun.writeTimeout, func(s *socket, reason reason) {
			if s.closing.Load() && reason != reasonWriteTimeout {
				return // closed already, waiting for its handler
			}
			a.m.errors[reason].Inc()
			a.log.Debug("closing socket", "reason", reason.String(), "socket_id", s.id)
			switch reason {
			case reasonNotAuthorized:
				// pusher-js does not reconnect from 4009 (refused).
				s.refuseNow(&protocol.Error{Code: protocol.CodeUnauthorized,
					Message: "Connection not authorized within " + a.cfg.UserAuthTimeout.String() + ": this app requires pusher:signin (or a private or presence subscription)"})
			case reasonIdle:
				// 4201: pusher-js reconnects at once, which is right for a
				// client whose network silently dropped.
				s.closeAsync(protocol.CodePongNotReceived, "activity timeout: no frame or pong received")
			default:
				// A stuck write: the peer does not read, so a close
				// handshake would only wait out its own timeout. Cutting
				// the TCP connection also ends the waiting write.
				s.closing.Store(true)
				s.link.cut()
			}
		})
		return nil
	}, func(error) { stopSweep() })

	g.Add(func() error {
		err := a.bus.Run(busCtx, a.route)
		if busCtx.Err() == nil {
			if err == nil {
				err = errors.New("returned early")
			}
			return fmt.Errorf("wsnode: event fan-out: %w", err)
		}
		return nil
	}, func(error) { stopBus() })

	g.Add(func() error {
		a.announce.Run(annCtx)
		return nil
	}, func(error) { stopAnn() })

	g.Add(func() error {
		a.runWaiters(annCtx)
		return nil
	}, func(error) { stopAnn() })

	g.Add(func() error {
		a.hooks.Run(annCtx)
		return nil
	}, func(error) { stopAnn() })

	if a.admin != nil {
		// The admin server outlives the drain, so /readyz reports 503
		// meanwhile; its Shutdown waits for the watches, which end with
		// the liveness subscription, after Remove.
		g.Add(func() error {
			if err := a.admin.Serve(); err != nil {
				return fmt.Errorf("wsnode: serve admin: %w", err)
			}
			return nil
		}, func(error) { a.admin.Shutdown(time.Second) })
	}

	err := g.Run()
	if cerr := a.rdb.Close(); cerr != nil && err == nil && removeErr == nil {
		err = fmt.Errorf("wsnode: close redis: %w", cerr)
	}
	return errors.Join(err, removeErr)
}

// drain runs the shutdown steps in order: readiness off, stop accepting,
// close every socket with 4200 over the drain window.
func (a *App) drain() {
	a.ready.Set(false)
	n := a.hub.len()
	a.log.Info("draining", "sockets", n, "window", a.cfg.Drain)
	a.hub.close()
	// In-flight upgrades finish quickly; hijacked sockets are not waited for.
	a.ws.Shutdown(2 * time.Second)
	start := time.Now()
	a.hub.drain(a.cfg.Drain, a.tun.drainGrace, a.tun.drainConcurrency, func(n int) {
		a.m.errors[reasonDrainForcedClosed].Add(float64(n))
		a.log.Warn("sockets did not finish their close handshake in time; cut them", "sockets", n)
	})
	a.log.Info("drained", "sockets", n, "took", time.Since(start).Round(time.Millisecond))
}
