package appreload

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/appstest"
	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/config"
)

const (
	oneApp  = `[{"id":"a","key":"ka","secret":"s"}]`
	twoApps = `[{"id":"a","key":"ka","secret":"s"},{"id":"b","key":"kb","secret":"s"}]`
	broken  = `[{"id":"a","key":"ka","secret":"s"},{"id":"b","key":"kb"}]`
)

func start(t *testing.T, src apps.Source, every time.Duration) (*apps.Registry, *Reloader) {
	reg, err := src.Load(context.Background())
	require.NoError(t, err)
	r := &Reloader{Registry: reg, Source: src, Every: every, Registerer: prometheus.NewRegistry(), Log: hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}})}
	r.init()
	r.started = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-r.started
	return reg, r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func eventually(t *testing.T, within time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKubernetesSwapIsSeenAtOnce: with polling effectively off, fsnotify
// alone must see the kubelet's ..data swap, which a watch on the file
// itself misses.
func TestKubernetesSwapIsSeenAtOnce(t *testing.T) {
	v := appstest.NewKubeVolume(t, "apps.json", oneApp)
	reg, r := start(t, apps.NewFile(v.Path()), time.Hour)
	changed := reg.Changed()
	v.Write(twoApps)
	eventually(t, 2*time.Second, func() bool { return reg.ByID("b") != nil }, "app b served after the swap")
	<-changed
	// The metrics follow the swap.
	eventually(t, 2*time.Second, func() bool { return testutil.ToFloat64(r.m.version.WithLabelValues(reg.Version().Hash)) == 1 }, "the version served shown")
	require.Equal(t, 1.0, testutil.ToFloat64(r.m.reloads.WithLabelValues("changed")))
}

func TestBrokenFileChangesNothing(t *testing.T) {
	v := appstest.NewKubeVolume(t, "apps.json", twoApps)
	reg, r := start(t, apps.NewFile(v.Path()), 20*time.Millisecond)
	version := reg.Version()
	b := reg.ByID("b")
	v.Write(broken)
	eventually(t, 2*time.Second, func() bool { return testutil.ToFloat64(r.m.reloads.WithLabelValues("failed")) == 1 }, "the broken file is read")
	eventually(t, 2*time.Second, func() bool { return testutil.ToFloat64(r.m.reloads.WithLabelValues("unchanged")) >= 3 }, "polled again")
	require.Equal(t, 1.0, testutil.ToFloat64(r.m.reloads.WithLabelValues("failed")), "the same broken bytes fail once")
	require.Equal(t, 0.0, testutil.ToFloat64(r.m.up))
	require.Same(t, b, reg.ByID("b"), "the last good apps keep serving")
	require.Equal(t, version, reg.Version())
	v.Write(oneApp)
	eventually(t, 2*time.Second, func() bool { return reg.ByID("b") == nil }, "a good file after a broken one is served")
}

// plainFile writes content to a file of a fresh directory.
func plainFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "apps.json")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestPollFindsWhatTheWatchCannot(t *testing.T) {
	p := plainFile(t, oneApp)
	reg, _ := start(t, pollOnly{apps.NewFile(p)}, 20*time.Millisecond)
	require.NoError(t, os.WriteFile(p, []byte(twoApps), 0o600))
	eventually(t, 2*time.Second, func() bool { return reg.ByID("b") != nil }, "a poll serves the change")
}

// pollOnly hides File's WatchPaths.
type pollOnly struct{ apps.Source }

func TestSIGHUPReloadsAtOnce(t *testing.T) {
	// Caught for the rest of the test binary: a SIGHUP of the loop below
	// still pending when Run's signal.Stop restored the default action
	// ended the binary ("signal: hangup", seen once in CI).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	p := plainFile(t, oneApp)
	reg, _ := start(t, pollOnly{apps.NewFile(p)}, time.Hour)
	require.NoError(t, os.WriteFile(p, []byte(twoApps), 0o600))
	// start returned once Run was watching, its SIGHUP handler set before.
	eventually(t, 2*time.Second, func() bool {
		_ = syscall.Kill(os.Getpid(), syscall.SIGHUP)
		return reg.ByID("b") != nil
	}, "SIGHUP reloads")
}

// flaky is a source whose Load fails as a database out of reach does once
// down is set.
type flaky struct {
	apps.Source
	down atomic.Bool
}

func (f *flaky) Load(ctx context.Context) (*apps.Registry, error) {
	if f.down.Load() {
		return nil, &apps.UnavailableError{Err: errors.New("dial tcp 127.0.0.1:5432: connection refused")}
	}
	return f.Source.Load(ctx)
}

// TestSourceOutOfReachKeepsTheApps: a source that cannot be read (a
// database down) leaves the last apps serving, says so at WARN (not
// ERROR: nothing is wrong with the apps), once while it lasts, and shows
// headcount_apps_source_up 0; it comes back by itself.
func TestSourceOutOfReachKeepsTheApps(t *testing.T) {
	p := plainFile(t, twoApps)
	src := &flaky{Source: pollOnly{apps.NewFile(p)}}
	var logs strings.Builder
	var mu sync.Mutex
	reg, err := src.Load(context.Background())
	require.NoError(t, err)
	r := &Reloader{Registry: reg, Source: src, Every: 20 * time.Millisecond, Registerer: prometheus.NewRegistry(),
		Log: hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logs}, Level: hclog.Debug})}
	r.init()
	r.started = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-r.started

	b := reg.ByID("b")
	src.down.Store(true)
	eventually(t, 2*time.Second, func() bool { return testutil.ToFloat64(r.m.reloads.WithLabelValues("failed")) >= 5 }, "polled while down")
	require.Equal(t, 0.0, testutil.ToFloat64(r.m.up))
	require.Same(t, b, reg.ByID("b"))
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	require.Equal(t, 1, strings.Count(out, "cannot read the apps; the last loaded keep serving"), out)
	require.Contains(t, out, "[WARN]")
	require.NotContains(t, out, "[ERROR]")

	require.NoError(t, os.WriteFile(p, []byte(oneApp), 0o600))
	src.down.Store(false)
	eventually(t, 2*time.Second, func() bool { return reg.ByID("b") == nil }, "served again once reachable")
	require.Equal(t, 1.0, testutil.ToFloat64(r.m.up))
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), "the apps' source answers again")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestNewRegistersMetrics: New registers the metrics, so a binary's
// /metrics has them before its reloader runs.
func TestNewRegistersMetrics(t *testing.T) {
	src := apps.NewFile(appstest.NewKubeVolume(t, "apps.json", oneApp).Path())
	loaded, err := src.Load(context.Background())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	New(config.Common{Apps: loaded, AppsSource: src}, hclog.NewNullLogger(), reg)
	require.Equal(t, 1.0, testutil.ToFloat64(collected{reg, "headcount_apps_source_up"}))
	require.Equal(t, 1.0, testutil.ToFloat64(collected{reg, "headcount_apps"}))
}

// collected reads one unlabelled gauge of reg.
type collected struct {
	reg  *prometheus.Registry
	name string
}

func (c collected) Describe(chan<- *prometheus.Desc) {}

func (c collected) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := c.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == c.name && len(mf.GetMetric()) == 1 {
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.name, "read back", nil, nil), prometheus.GaugeValue, mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
}
