package appreload

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headcount/headcount/pkg/apps"
)

type metrics struct {
	reloads *prometheus.CounterVec
	lookups *prometheus.CounterVec
	up      prometheus.Gauge
	version *prometheus.GaugeVec
	loaded  prometheus.Gauge
	count   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "headcount_apps_reloads_total",
			Help: "Reads of the apps' source, by result: changed (a new set served), unchanged, failed (the last good apps keep serving)."}, []string{"result"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "headcount_apps_lookups_total",
			Help: "Requests naming an app this process did not serve (an unknown key or id, a disabled app, a key not of its app), by result: found (served after a read of the source), unknown (not after it), failed (the read failed or outlasted 10 s), remembered (named in vain within 3 s: refused without a read)."}, []string{"result"}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headcount_apps_source_up",
			Help: "1 if the last read of the apps' source succeeded, 0 if it failed."}),
		version: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "headcount_apps_version_info",
			Help: "1 for the content hash of the set of apps this process serves."}, []string{"hash"}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headcount_apps_loaded_timestamp_seconds",
			Help: "When the set of apps this process serves was loaded, in Unix seconds; 0 before one is."}),
		count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "headcount_apps",
			Help: "Apps this process serves."}),
	}
	if reg != nil {
		reg.MustRegister(m.reloads, m.lookups, m.up, m.version, m.loaded, m.count)
	}
	for _, r := range []string{"changed", "unchanged", "failed"} {
		m.reloads.WithLabelValues(r)
	}
	for _, r := range []string{"found", "unknown", "failed", "remembered"} {
		m.lookups.WithLabelValues(r)
	}
	return m
}

// served shows the set reg serves.
func (m *metrics) served(reg *apps.Registry) {
	v := reg.Version()
	m.version.Reset()
	if !reg.Loaded() {
		return
	}
	m.up.Set(1)
	m.version.WithLabelValues(v.Hash).Set(1)
	m.loaded.Set(float64(v.LoadedAt.UnixNano()) / 1e9)
	m.count.Set(float64(len(reg.All())))
}
