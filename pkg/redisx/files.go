package redisx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/headcount/headcount/pkg/config"
)

// recheck is how often, at most, the files are looked at again: one stat
// each, on a new connection or a scrape, never per command. A rotation
// reaches the next connection made this long after it.
const recheck = time.Second

// files holds the TLS and password files of the settings, loaded when the
// client is built and re-read when one changes (its inode, size or mtime:
// a Kubernetes Secret volume swaps a ..data symlink). A file that fails to
// load keeps the last good one, with a log line and
// headcount_redis_file_reloads_total{result="error"}.
type files struct {
	log hclog.Logger
	// base is the URL's TLS configuration; nil when TLS is off.
	base *tls.Config

	mu      sync.Mutex
	checked time.Time
	watched []*watched
	// What the files held when they last loaded well.
	pool     *x509.CertPool
	cert     *tls.Certificate
	password string
	tls      *tls.Config
	// sentinelPassword is the sentinels' own, from
	// --redis-sentinel-password-file.
	sentinelPassword string
	// passwordFile is --redis-password-file, sentinelPasswordFile
	// --redis-sentinel-password-file; empty for none.
	passwordFile, sentinelPasswordFile string
}

// watched is one file, or a certificate with its key, and its last load.
type watched struct {
	name  string // the configured path: the metrics' file label
	paths []string
	seen  []os.FileInfo // nil where the stat failed
	load  func() (notAfter time.Time, err error)
	// notAfter is the expiry of the certificate (the earliest CA of a
	// bundle) last loaded; zero for a password.
	notAfter   time.Time
	ok, failed int
}

// newFiles loads c's files, failing on any (validation checked them, but
// they may have changed since). base is the TLS configuration of the
// options, nil when TLS is off.
func newFiles(c config.Common, base *tls.Config) (*files, error) {
	f := &files{log: c.RedisLogger, base: base, passwordFile: c.RedisPasswordFile, sentinelPasswordFile: c.RedisSentinelPasswordFile}
	if f.log == nil {
		f.log = hclog.NewNullLogger()
	}
	f.log = f.log.Named("redis")
	if base != nil && c.RedisTLSCA != "" {
		f.add(c.RedisTLSCA, func() (time.Time, error) {
			pool, notAfter, err := config.LoadRedisCA(c.RedisTLSCA)
			if err == nil {
				f.pool = pool
			}
			return notAfter, err
		}, c.RedisTLSCA)
	}
	if base != nil && c.RedisTLSCert != "" {
		f.add(c.RedisTLSCert, func() (time.Time, error) {
			cert, err := config.LoadRedisCert(c.RedisTLSCert, c.RedisTLSKey)
			if err != nil {
				return time.Time{}, err
			}
			f.cert = &cert
			return cert.Leaf.NotAfter, nil
		}, c.RedisTLSCert, c.RedisTLSKey)
	}
	if c.RedisPasswordFile != "" {
		f.add(c.RedisPasswordFile, func() (time.Time, error) {
			pw, err := config.ReadRedisPassword(c.RedisPasswordFile)
			if err == nil {
				f.password = pw
			}
			return time.Time{}, err
		}, c.RedisPasswordFile)
	}
	if c.RedisSentinelPasswordFile != "" {
		f.add(c.RedisSentinelPasswordFile, func() (time.Time, error) {
			pw, err := config.ReadRedisPassword(c.RedisSentinelPasswordFile)
			if err == nil {
				f.sentinelPassword = pw
			}
			return time.Time{}, err
		}, c.RedisSentinelPasswordFile)
	}
	var errs []error
	for _, w := range f.watched {
		w.seen = stat(w.paths)
		var err error
		if w.notAfter, err = w.load(); err != nil {
			errs = append(errs, err)
		}
	}
	f.checked = time.Now()
	f.build()
	return f, errors.Join(errs...)
}

func (f *files) add(name string, load func() (time.Time, error), paths ...string) {
	f.watched = append(f.watched, &watched{name: name, paths: paths, load: load})
}

// stat returns each path's file information, following symlinks.
func stat(paths []string) []os.FileInfo {
	out := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		out[i], _ = os.Stat(p)
	}
	return out
}

// same reports whether two stats of the same paths show the same files.
func same(a, b []os.FileInfo) bool {
	for i := range a {
		switch {
		case a[i] == nil || b[i] == nil:
			if a[i] != b[i] {
				return false
			}
		case !os.SameFile(a[i], b[i]) || a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()):
			return false
		}
	}
	return true
}

// build makes the TLS configuration of the files last loaded well: a
// tls.Config is not to be changed once in use, so each load makes one.
func (f *files) build() {
	if f.base == nil {
		return
	}
	cfg := f.base.Clone()
	cfg.RootCAs = f.pool
	if f.cert != nil {
		cfg.Certificates = []tls.Certificate{*f.cert}
	}
	f.tls = cfg
}

// current returns the TLS configuration and the passwords to use now
// (the servers', the sentinels'), first re-reading the files that changed
// if recheck has passed.
func (f *files) current() (cfg *tls.Config, password, sentinelPassword string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= recheck {
		f.checked = now
		f.reload()
	}
	return f.tls, f.password, f.sentinelPassword
}

// reload loads every file whose stat changed since its last load.
func (f *files) reload() {
	changed := false
	for _, w := range f.watched {
		st := stat(w.paths)
		if same(w.seen, st) {
			continue
		}
		w.seen = st // a bad file is reported once, not on every check
		notAfter, err := w.load()
		if err != nil {
			w.failed++
			f.log.Error("cannot reload a Redis file: keeping the last good one", "file", w.name, "error", err)
			continue
		}
		w.ok++
		w.notAfter, changed = notAfter, true
		f.log.Info("reloaded a Redis file", "file", w.name)
	}
	if changed {
		f.build()
	}
}

// watch loads c's files and registers their metrics on
// c.RedisRegisterer, with no file too: the names exist in every binary,
// as alerts and their tests expect. Another client of the same settings
// on the same registry leaves the first one's there: they read the same
// files.
func watch(c config.Common, base *tls.Config) (*files, error) {
	f, err := newFiles(c, base)
	if err != nil {
		return nil, err
	}
	if c.RedisRegisterer != nil {
		if err := c.RedisRegisterer.Register(f); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil, err
		}
	}
	return f, nil
}

// hooks returns the go-redis options that make each new connection read
// the files: a dialer when TLS is on, a credentials provider for user
// when a password file is set; nil for the defaults otherwise. A
// Sentinel-mode client adds sentinelAuth.
func (f *files) hooks(user string) (dial func(context.Context, string, string) (net.Conn, error), creds func(context.Context) (string, string, error)) {
	if f.base != nil {
		dial = f.dial
	}
	if f.passwordFile != "" {
		creds = f.credentials(user)
	}
	return dial, creds
}

// dial opens a connection with the TLS configuration of the moment: the
// files as they are now, not as they were at the start.
func (f *files) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	cfg, _, _ := f.current()
	return redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: cfg})(ctx, network, addr)
}

// sentinelAuth is the OnConnect of a Sentinel-mode client whose
// sentinels' password is a file. go-redis takes the sentinels' password
// as a fixed string, read whenever it makes a sentinel client, that
// nothing may change once the client runs; so it is given none, each new
// connection to a sentinel gets past HELLO unauthenticated (go-redis then
// speaks RESP2 to it), and authenticates here with the file's password of
// the moment. go-redis names the master's connections "FailoverClient"
// (the credentials provider authenticates those): every other one is a
// sentinel's. TestSentinelPasswordFileRotates fails if that changes.
func (f *files) sentinelAuth(user string) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if strings.HasPrefix(cn.String(), "Redis<FailoverClient ") {
			return nil
		}
		_, _, pw := f.current()
		if user != "" {
			return cn.AuthACL(ctx, user, pw).Err()
		}
		return cn.Auth(ctx, pw).Err()
	}
}

// credentials returns user with the password file's password of the
// moment, for each new connection's AUTH.
func (f *files) credentials(user string) func(context.Context) (string, string, error) {
	return func(context.Context) (string, string, error) {
		_, pw, _ := f.current()
		return user, pw, nil
	}
}

var (
	expiryDesc = prometheus.NewDesc("headcount_tls_cert_expiry_timestamp_seconds",
		"When the certificate loaded from file expires (Unix seconds); for a CA bundle, its earliest.",
		[]string{"file"}, nil)
	reloadsDesc = prometheus.NewDesc("headcount_redis_file_reloads_total",
		"Reloads of a changed Redis TLS or password file, by result: on error the last good one stays in use.",
		[]string{"file", "result"}, nil)
)

// Describe implements prometheus.Collector.
func (f *files) Describe(ch chan<- *prometheus.Desc) {
	ch <- expiryDesc
	ch <- reloadsDesc
}

// Collect implements prometheus.Collector. A scrape looks at the files
// too, so the expiry shown follows a renewal even while no connection is
// made.
func (f *files) Collect(ch chan<- prometheus.Metric) {
	f.current()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.watched {
		if !w.notAfter.IsZero() {
			ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(w.notAfter.Unix()), w.name)
		}
		ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(w.ok), w.name, "ok")
		ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(w.failed), w.name, "error")
	}
}
