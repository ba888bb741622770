package metricstest_test

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/metricstest"
)

// The same series read from the registry and from its /metrics page, by
// name, by some labels, summed, and a summary's _count and _sum.
func TestReadsGatheredAndScraped(t *testing.T) {
	reg := prometheus.NewRegistry()
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_errors_total", Help: "h"}, []string{"reason", "app"})
	open := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_open", Help: "h"})
	took := prometheus.NewSummary(prometheus.SummaryOpts{Name: "x_took_seconds", Help: "h"})
	reg.MustRegister(errs, open, took)
	errs.WithLabelValues("write", "a").Add(2)
	errs.WithLabelValues("write", "b").Add(3)
	errs.WithLabelValues("auth", "a").Add(5)
	open.Set(7)
	took.Observe(0.5)
	took.Observe(1.5)

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	scraped, err := metricstest.Scrape(srv.URL)
	require.NoError(t, err)
	gathered, err := metricstest.Gather(reg)
	require.NoError(t, err)

	for what, f := range map[string]metricstest.Families{"scraped": scraped, "gathered": gathered} {
		sum := func(name string, labels ...string) float64 {
			v, ok := f.Sum(name, labels...)
			require.True(t, ok, "%s: %s%v", what, name, labels)
			return v
		}
		require.Equal(t, 10.0, sum("x_errors_total"), what)
		require.Equal(t, 5.0, sum("x_errors_total", "reason", "write"), what)
		require.Equal(t, 2.0, sum("x_errors_total", "reason", "write", "app", "a"), what)
		require.Equal(t, 7.0, sum("x_open"), what)
		require.Equal(t, 2.0, sum("x_took_seconds_count"), what)
		require.Equal(t, 2.0, sum("x_took_seconds_sum"), what)
		_, ok := f.Sum("x_errors_total", "reason", "nope")
		require.False(t, ok, what)
		_, ok = f.Sum("x_missing")
		require.False(t, ok, what)
		require.ElementsMatch(t, []string{"write", "write", "auth"}, f.LabelValues("x_errors_total", "reason"), what)
	}

	v, err := metricstest.Read(srv.URL, "x_errors_total", "app", "a")
	require.NoError(t, err)
	require.Equal(t, 7.0, v)
	_, err = metricstest.Read(srv.URL, "x_missing")
	require.True(t, errors.Is(err, metricstest.ErrAbsent), "%v", err)
}
