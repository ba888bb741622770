package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/keyspace"
	"github.com/headcount/headcount/pkg/lease"
)

// Defaults of Options.
const (
	DefaultDebounce    = 3 * time.Second
	DefaultRetryWindow = 5 * time.Minute
	DefaultLeaseTTL    = 3 * time.Second
	DefaultTimeout     = 5 * time.Second
	defaultTrimEvery   = 10 * time.Second
)

// Options configure a Deliverer.
type Options struct {
	Apps *apps.Registry
	// Keyspace holds the apps' event logs and the deliverers' leases; the
	// zero Keyspace has the default prefix.
	Keyspace keyspace.Space
	// Replica names this process in the consumer groups (unique per process).
	Replica    string
	Logger     hclog.Logger
	Registerer prometheus.Registerer
	// Client posts the webhooks; nil means one with DefaultTimeout. The
	// deliverer uses a copy that never follows redirects (see post).
	Client *http.Client
	// Debounce holds channel_vacated and member_removed this long, dropping
	// them if the channel or member came back meanwhile.
	Debounce time.Duration
	// RetryWindow is how long after its creation an event is retried.
	RetryWindow time.Duration
	// LeaseTTL bounds how long a dead replica's webhooks wait for another.
	LeaseTTL time.Duration
	// TrimEvery is how often the delivered part of an app's log is trimmed.
	TrimEvery time.Duration
}

// Deliverer posts the events of every app's event log to the app's
// webhooks. Each (app, webhook URL) is delivered by one replica at a time,
// the holder of its lease; every replica contends for every webhook, so
// the work spreads over replicas and a dead one's is taken over within a
// lease TTL.
type Deliverer struct {
	rdb  redis.UniversalClient
	opts Options
	log  hclog.Logger
	m    *metrics
}

// New returns a deliverer on rdb.
func New(rdb redis.UniversalClient, opts Options) *Deliverer {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: DefaultTimeout}
	}
	// A copy, so the caller's client keeps its own redirect policy.
	client := *opts.Client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	opts.Client = &client
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.RetryWindow <= 0 {
		opts.RetryWindow = DefaultRetryWindow
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.TrimEvery <= 0 {
		opts.TrimEvery = defaultTrimEvery
	}
	return &Deliverer{rdb: rdb, opts: opts, log: opts.Logger.Named("webhook"), m: newMetrics(opts.Registerer)}
}

// Run delivers until ctx ends (and only then returns). It follows the apps
// as they are reloaded: a webhook URL added starts its delivery, one
// removed stops, and every target of an app that changed in any way is
// restarted on the app as it now is (its secret, headers, filters). A
// restart lets the posts under way finish and acknowledges them; what
// was read and not posted is delivered by the restarted target.
func (d *Deliverer) Run(ctx context.Context) error {
	type running struct {
		app  *apps.App
		stop context.CancelFunc
		done chan struct{}
	}
	targets := map[[2]string]*running{} // app id, url
	defer func() {
		for _, r := range targets {
			r.stop()
		}
		for _, r := range targets {
			<-r.done
		}
	}()
	for {
		changed := d.opts.Apps.Changed()
		want := map[[2]string]*apps.App{}
		for _, app := range d.opts.Apps.All() {
			for _, w := range app.Webhooks {
				if w.URL != "" {
					want[[2]string{app.ID, w.URL}] = app
				}
			}
		}
		var stopped []*running
		for k, r := range targets {
			if want[k] != r.app { // removed, or its app changed (a new *App)
				r.stop()
				stopped = append(stopped, r)
				delete(targets, k)
			}
		}
		// Stopped together, waited for together: each may be finishing a
		// request and releasing its lease.
		for _, r := range stopped {
			<-r.done
		}
		for k, app := range want {
			if targets[k] != nil {
				continue
			}
			t := d.target(app, k[1])
			tctx, stop := context.WithCancel(ctx)
			r := &running{app: app, stop: stop, done: make(chan struct{})}
			targets[k] = r
			go func() {
				defer close(r.done)
				e := &lease.Elector{Lease: lease.New(d.rdb, t.leaseKey(), d.opts.LeaseTTL), Log: t.log,
					OnChange: func(active bool) { d.m.active.WithLabelValues(app.ID, t.group).Set(map[bool]float64{true: 1}[active]) }}
				_ = e.Run(tctx, t.deliver)
				d.m.active.DeleteLabelValues(app.ID, t.group)
			}()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// target is one webhook URL of one app.
type target struct {
	d   *Deliverer
	app *apps.App
	url string
	// hooks are the app's webhooks with this URL: an event is sent if one
	// of them wants its type and channel. They share headers and batch
	// (apps checks it).
	hooks   []apps.Webhook
	headers map[string]string
	batch   *apps.WebhookBatch // nil: one event per request
	group   string
	key     string
	log     hclog.Logger
	// trims: this target trims the app's log (the first URL by group name).
	trims bool
	// lastRedirectLog rate-limits the warning about a redirecting receiver
	// (only the deliver goroutine touches it).
	lastRedirectLog time.Time
}

func (d *Deliverer) target(app *apps.App, url string) *target {
	t := &target{d: d, app: app, url: url, group: groupName(url), key: eventlog.Key(d.opts.Keyspace, app.ID)}
	for _, w := range app.Webhooks {
		if w.URL == url {
			t.hooks = append(t.hooks, w)
		}
	}
	t.headers, t.batch = t.hooks[0].Headers, t.hooks[0].Batch
	groups := make([]string, 0, len(app.Webhooks))
	for _, w := range app.Webhooks {
		groups = append(groups, groupName(w.URL))
	}
	sort.Strings(groups)
	t.trims = groups[0] == t.group
	t.log = d.log.With("app", app.ID, "webhook", t.group)
	return t
}

// groupName is the consumer group (and metric label) of a webhook URL.
func groupName(url string) string {
	h := sha256.Sum256([]byte(url))
	return "wh-" + hex.EncodeToString(h[:6])
}

func (t *target) leaseKey() string { return leaseKey(t.d.opts.Keyspace, t.app.ID, t.group) }

// wants reports whether one of the target's webhooks asks for ev: its
// type, and its channel through the webhook's filter.
func (t *target) wants(ev Event) bool {
	return wantsEvent(t.hooks, ev)
}
