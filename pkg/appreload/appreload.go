package appreload

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
)

// DefaultEvery is how often a source is read when nothing announced a
// change: within it, a change fsnotify missed (a network filesystem, a
// database row) is served.
const DefaultEvery = 2 * time.Second

// repeatEvery is how often the same failure is logged again.
const repeatEvery = time.Minute

// loadTimeout bounds one read of the source, and so the wait of a
// request whose app is looked up (Lookup).
const loadTimeout = 10 * time.Second

// Reloader keeps Registry serving what Source holds.
type Reloader struct {
	Registry *apps.Registry
	// Source is where the apps are; nil when they came from the
	// environment, which a running process cannot read anew (a SIGHUP
	// then only says so).
	Source apps.Source
	// Every is the poll period; zero means DefaultEvery.
	Every time.Duration
	Log   hclog.Logger
	// Registerer takes the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// OnChange, if set, runs after each reload that changed the apps (a
	// binary repeats its start-time warnings about them).
	OnChange func(apps.Diff)

	m        *metrics
	initOnce sync.Once
	started  chan struct{} // closed once Run watches (tests wait on it)
	look     lookups
	// mu makes reads one at a time: the poll's and the lookups' would
	// otherwise replace the apps in any order, an older read last.
	mu      sync.Mutex
	lastErr string
	lastAt  time.Time
	// unavailable: the last read failed to reach the source at all.
	unavailable bool
}

// watcher is a Source with paths fsnotify can watch (apps.File).
type watcher interface{ WatchPaths() []string }

// Run reads the source every Every, on each change fsnotify reports in the
// source's paths, and on SIGHUP, until ctx ends. A Registry with nothing
// loaded yet (a database) is loaded first, retried every Every.
func (r *Reloader) Run(ctx context.Context) error {
	r.init()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if r.Source == nil {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				r.Log.Info("SIGHUP: the apps come from the environment, which a running process cannot read anew; nothing reloaded")
			}
		}
	}
	if c, ok := r.Source.(io.Closer); ok {
		defer func() { _ = c.Close() }()
	}
	events, stop := r.watch()
	defer stop()
	if r.started != nil {
		close(r.started)
	}
	if !r.Registry.Loaded() {
		r.reload(ctx)
	}
	tick := time.NewTicker(r.every())
	defer tick.Stop()
	// settle gathers the burst of events one replacement makes (the
	// kubelet's new directory, its symlink, the rename) into one read.
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			r.Log.Info("SIGHUP: reloading the apps", "source", r.Source.String())
			r.reload(ctx)
		case <-tick.C:
			r.reload(ctx)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			r.Log.Trace("apps file watch", "event", ev)
			if settle == nil {
				settle = time.After(50 * time.Millisecond)
			}
		case <-settle:
			settle = nil
			r.reload(ctx)
		}
	}
}

func (r *Reloader) init() {
	r.initOnce.Do(func() {
		if r.Log == nil {
			r.Log = hclog.NewNullLogger()
		}
		if r.m == nil {
			r.m = newMetrics(r.Registerer)
			r.m.served(r.Registry)
		}
	})
}

func (r *Reloader) every() time.Duration {
	if r.Every > 0 {
		return r.Every
	}
	return DefaultEvery
}

// reload reads the source once and, if it holds a new valid set of apps,
// serves it. A failure changes nothing: the last apps loaded keep serving.
// It reports whether the source was read (false: the read failed).
func (r *Reloader) reload(ctx context.Context) bool {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	next, err := r.Source.Load(ctx)
	switch {
	case errors.Is(err, apps.ErrUnchanged): // as good or as bad as last time
		r.m.reloads.WithLabelValues("unchanged").Inc()
		if r.unavailable {
			r.recovered()
		}
		return true
	case err != nil:
		r.m.reloads.WithLabelValues("failed").Inc()
		r.m.up.Set(0)
		r.failed(err)
		return false
	}
	r.recovered()
	d := r.Registry.Replace(next)
	if d.Empty() {
		r.m.reloads.WithLabelValues("unchanged").Inc()
		return true
	}
	r.m.reloads.WithLabelValues("changed").Inc()
	r.m.served(r.Registry)
	v := r.Registry.Version()
	r.Log.Info("apps reloaded", "source", r.Source.String(), "version", v.Hash, "apps", len(r.Registry.All()),
		"added", list(d.Added), "removed", list(d.Removed), "changed", list(d.Changed), "disabled", list(d.Disabled))
	for _, w := range r.Registry.Warnings() {
		r.Log.Warn("apps: " + w)
	}
	if r.OnChange != nil {
		r.OnChange(d)
	}
	return true
}

// failed logs a failure: at once when it differs from the last one, else
// once a minute. Apps that do not parse are an ERROR (someone must fix
// the source), a source out of reach a WARN (it may come back by itself).
func (r *Reloader) failed(err error) {
	now := time.Now()
	if err.Error() == r.lastErr && now.Sub(r.lastAt) < repeatEvery {
		return
	}
	r.lastErr, r.lastAt = err.Error(), now
	v := r.Registry.Version()
	var unavailable *apps.UnavailableError
	r.unavailable = errors.As(err, &unavailable)
	args := []any{"source", r.Source.String(), "serving", v.Hash, "error", err}
	switch {
	case !r.Registry.Loaded():
		r.Log.Error("cannot load the apps; not ready until they are", "source", r.Source.String(), "error", err)
	case r.unavailable:
		r.Log.Warn("cannot read the apps; the last loaded keep serving", args...)
	default:
		r.Log.Error("the apps changed but are not valid; the last good apps keep serving", args...)
	}
}

// recovered notes a read that succeeded: the source answers again after
// failures, which is said once.
func (r *Reloader) recovered() {
	r.m.up.Set(1)
	if r.unavailable {
		r.Log.Info("the apps' source answers again", "source", r.Source.String())
	}
	r.unavailable, r.lastErr = false, ""
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "-"
	}
	return strings.Join(ids, ",")
}

// watch starts an fsnotify watch on the source's paths, if it has any. A
// watch that cannot be set up leaves the poll to find changes.
func (r *Reloader) watch() (<-chan fsnotify.Event, func()) {
	w, ok := r.Source.(watcher)
	if !ok {
		return nil, func() {}
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		r.Log.Warn("cannot watch the apps file; changes are found by polling", "every", r.every(), "error", err)
		return nil, func() {}
	}
	for _, p := range w.WatchPaths() {
		if err := fw.Add(p); err != nil {
			r.Log.Warn("cannot watch a directory of the apps file; changes are found by polling", "dir", p, "every", r.every(), "error", err)
		}
	}
	go func() {
		for err := range fw.Errors {
			r.Log.Debug("apps file watch", "error", err)
		}
	}()
	return fw.Events, func() { _ = fw.Close() }
}

// New returns the reloader of the apps a binary's configuration names,
// giving the source the reloader's logger if it takes one (a database's
// warns about the columns it ignores).
func New(c config.Common, log hclog.Logger, reg prometheus.Registerer) *Reloader {
	r := &Reloader{Registry: c.Apps, Source: c.AppsSource, Every: c.AppsRefresh, Log: log.Named("apps"), Registerer: reg}
	if s, ok := r.Source.(interface{ SetLogger(hclog.Logger) }); ok {
		s.SetLogger(r.Log)
	}
	for _, w := range c.AppsIgnored {
		r.Log.Warn(w)
	}
	// Registered now, as other packages register theirs in their
	// constructors: a binary's metrics are all there once it is built.
	r.init()
	return r
}
