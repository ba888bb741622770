package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/keyspace"
)

// Kind is what a budget counts; it is the kind label of the metrics.
type Kind string

// The budgets' kinds.
const (
	// ClientEvents are client-* events of one socket (wsnode, per socket).
	ClientEvents Kind = "client_events"
	// BackendEvents are events published through the HTTP API, each
	// channel of each event counting one, as soketi counts them.
	BackendEvents Kind = "backend_events"
	// ReadRequests are the HTTP API's GET requests.
	ReadRequests Kind = "read_requests"
)

// Window is the length of a budget's window: limits are per second.
const Window = time.Second

// warnEvery spaces the warnings of a failing limiter.
const warnEvery = time.Minute

// Metrics counts the rejections of every kind, by app, and the limiter's
// Redis errors.
type Metrics struct {
	rejected *prometheus.CounterVec
	errors   *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_ratelimit_rejected_total",
			Help: "Requests and client events refused for going over the app's per-second limit, by app and kind (client_events, backend_events, read_requests).",
		}, []string{"app", "kind"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "headcount_ratelimit_errors_total",
			Help: "Limit checks that could not reach Redis and let the request through, by kind.",
		}, []string{"kind"}),
	}
}

// Rejected counts one rejection.
func (m *Metrics) Rejected(app string, kind Kind) {
	m.rejected.WithLabelValues(app, string(kind)).Inc()
}

// Options configures a Limiter.
type Options struct {
	Keyspace keyspace.Space
	Metrics  *Metrics
	// Logger gets the fail-open warnings; nil discards them.
	Logger hclog.Logger
	// Window overrides the window's length, for tests; zero: Window.
	Window time.Duration
}

// Limiter takes from the apps' budgets in Redis.
type Limiter struct {
	rdb      redis.UniversalClient
	keys     keys
	m        *Metrics
	log      hclog.Logger
	window   time.Duration
	warnedAt atomic.Int64 // unix ns of the last fail-open warning
}

// New returns a limiter over rdb.
func New(rdb redis.UniversalClient, opts Options) *Limiter {
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	m := opts.Metrics
	if m == nil {
		m = NewMetrics(prometheus.NewRegistry())
	}
	window := opts.Window
	if window <= 0 {
		window = Window
	}
	return &Limiter{rdb: rdb, keys: keys{opts.Keyspace}, m: m, log: log.Named("ratelimit"), window: window}
}

// Result is the outcome of a Take.
type Result struct {
	// Allowed is false when the points would go over the limit.
	Allowed bool
	// Limit is the budget of a window; 0 when the app sets none.
	Limit int
	// Remaining is what is left of the window's budget after this take.
	Remaining int
	// Reset is how long until the window ends.
	Reset time.Duration
	// Err is the Redis error of a take that let the request through
	// without knowing (fail open).
	Err error
}

// Take spends points from app's budget of kind, whose limit is limit
// points per window (Window); limit <= 0 means no limit, and Take does nothing.
// A rejection is counted in the metrics.
func (l *Limiter) Take(ctx context.Context, app string, kind Kind, limit, points int) Result {
	if limit <= 0 {
		return Result{Allowed: true}
	}
	res, err := takeScript.Run(ctx, l.rdb, []string{l.keys.window(app, kind)}, limit, points, l.window.Milliseconds()).Int64Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("take.lua returned %d values", len(res))
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			l.m.errors.WithLabelValues(string(kind)).Inc()
			l.warn(app, kind, err)
		}
		return Result{Allowed: true, Limit: limit, Remaining: limit, Reset: l.window, Err: err}
	}
	r := Result{Allowed: res[0] == takeAllowed, Limit: limit, Remaining: int(max(res[1], 0)), Reset: time.Duration(res[2]) * time.Millisecond}
	if !r.Allowed {
		l.m.Rejected(app, kind)
	}
	return r
}

// warn logs a fail-open at most once per warnEvery.
func (l *Limiter) warn(app string, kind Kind, err error) {
	now := time.Now().UnixNano()
	last := l.warnedAt.Load()
	if now-last < int64(warnEvery) || !l.warnedAt.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("cannot check a rate limit in Redis; letting requests through until it answers (logged at most once a minute)",
		"app", app, "kind", string(kind), "error", err)
}

// Metrics returns the metrics the limiter counts in.
func (l *Limiter) Metrics() *Metrics { return l.m }
