package prometheus_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/headcount/headcount/internal/metricnames"
	"github.com/headcount/headcount/internal/metricstest"
	"github.com/headcount/headcount/internal/redistest"
)

// dashboardFile is the Grafana dashboard, whose Redis row reads
// redis_exporter's series.
const dashboardFile = "../grafana/headcount.json"

// redisMetric is a redis_exporter metric's name where an expression uses it.
var redisMetric = regexp.MustCompile(`\bredis_[a-z0-9_]*[a-z0-9]\b`)

// TestRedisExporterMetrics: every redis_ metric the dashboard's queries
// and the alerts read is one a real redis_exporter (Debian's, the
// version this runs) exposes, for a primary with a password as the
// chart's Redis has, a replica, and a Redis Cluster node: a metric
// renamed, or misspelt in a query, fails here rather than draw nothing.
func TestRedisExporterMetrics(t *testing.T) {
	used := map[string][]string{} // name -> where
	for _, r := range alerts(t) {
		for _, name := range redisMetric.FindAllString(r.Expr, -1) {
			used[name] = append(used[name], r.Alert)
		}
	}
	for _, q := range dashboardQueries(t) {
		for _, name := range redisMetric.FindAllString(q, -1) {
			used[name] = append(used[name], "the dashboard")
		}
	}
	require.NotEmpty(t, used)

	const password = "exporter-test-password"
	primary, _ := filledRedis(t, password)
	replica := redistest.New(t)
	rc := replica.Client(t)
	ctx := t.Context()
	require.NoError(t, rc.ConfigSet(ctx, "masterauth", password).Err())
	host, port, _ := strings.Cut(primary.Addr, ":")
	require.NoError(t, rc.ReplicaOf(ctx, host, port).Err())
	cluster := redistest.NewCluster(t)

	exposed := map[string]bool{}
	for _, e := range []*redistest.Exporter{
		redistest.NewExporter(t, primary, password),
		redistest.NewExporter(t, replica, ""),
		redistest.NewExporter(t, cluster.Nodes[0], ""),
	} {
		for name := range scrape(t, e) {
			exposed[name] = true
		}
	}
	for name, where := range used {
		require.True(t, exposed[name], "%s (used by %s) is not exposed by %s", name, strings.Join(slices.Compact(where), ", "), "prometheus-redis-exporter")
	}
}

// TestRedisMemoryAlertFiresOnAFullRedis evaluates HeadcountRedisMemoryHigh,
// as alerts.yaml has it (expression, for and labels), with promtool on
// what a real redis_exporter reports of a real Redis: silent while Redis
// has room, firing once writes filled it to its maxmemory.
func TestRedisMemoryAlertFiresOnAFullRedis(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed: install Debian's prometheus package (make deps does): %v", err)
	}
	var rule rule
	for _, r := range alerts(t) {
		if r.Alert == "HeadcountRedisMemoryHigh" {
			rule = r
		}
	}
	require.NotEmpty(t, rule.Expr, "no HeadcountRedisMemoryHigh in %s", rulesFile)
	forDur, err := model.ParseDuration(rule.For)
	require.NoError(t, err, "for: %q", rule.For)

	const password = "exporter-test-password"
	srv, fill := filledRedis(t, password)
	e := redistest.NewExporter(t, srv, password)
	roomy := scrape(t, e)
	fill()
	full := scrape(t, e)

	// The rule without its annotations, which template the values this
	// test does not fix.
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "redis", "rules": []any{
		map[string]any{"alert": rule.Alert, "expr": rule.Expr, "for": rule.For, "labels": rule.Labels},
	}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rule.yaml"), rules, 0o600))
	target := map[string]string{"namespace": "hc", "instance": "redis-0", "job": "redis"}
	evalAt := time.Duration(forDur) + 5*time.Minute
	testCase := func(name string, samples map[string]*sampled, fires bool) map[string]any {
		var series []map[string]string
		for _, metric := range []string{"redis_memory_used_bytes", "redis_memory_max_bytes"} {
			s := samples[metric]
			require.NotNil(t, s, "the exporter reported no %s", metric)
			series = append(series, map[string]string{
				"series": metric + labelSet(s.labels, target),
				"values": fmt.Sprintf("%sx%d", strconv.FormatFloat(s.value, 'f', -1, 64), int(evalAt/time.Minute)+1),
			})
		}
		exp := []any{}
		if fires {
			labels := map[string]string{}
			for k, v := range rule.Labels {
				labels[k] = v
			}
			for k, v := range target {
				labels[k] = v
			}
			exp = append(exp, map[string]any{"exp_labels": labels})
		}
		return map[string]any{
			"name": name, "interval": "1m", "input_series": series,
			"alert_rule_test": []any{map[string]any{"eval_time": evalAt.String(), "alertname": rule.Alert, "exp_alerts": exp}},
		}
	}
	tests, err := yaml.Marshal(map[string]any{
		"rule_files":          []string{"rule.yaml"},
		"evaluation_interval": "1m",
		"tests": []any{
			testCase("a Redis with room", roomy, false),
			testCase("a Redis filled to its maxmemory", full, true),
		},
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rule_test.yaml"), tests, 0o600))
	cmd := exec.Command(promtool, "test", "rules", "rule_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s\n%s", out, tests)
	t.Logf("used %.0f of %.0f bytes before the fill, %.0f after", roomy["redis_memory_used_bytes"].value,
		roomy["redis_memory_max_bytes"].value, full["redis_memory_used_bytes"].value)
}

// filledRedis starts a redis-server with password as its requirepass and
// a maxmemory of 4 MiB with noeviction, as the chart's Redis runs (its
// maxmemory smaller), and returns it and a function that writes until
// Redis refuses a write for want of memory.
func filledRedis(t *testing.T, password string) (*redistest.Server, func()) {
	t.Helper()
	srv := redistest.New(t)
	ctx := t.Context()
	admin := srv.Client(t)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "4mb").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, admin.ConfigSet(ctx, "requirepass", password).Err())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: password})
	t.Cleanup(func() { _ = c.Close() })
	return srv, func() {
		value := strings.Repeat("x", 16<<10)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// 4 MiB in 16 KiB values is 256 writes; the bound is far above.
		for i := range 10000 {
			err := c.Set(ctx, "fill:"+strconv.Itoa(i), value, 0).Err()
			if err != nil {
				require.True(t, strings.HasPrefix(err.Error(), "OOM"), "write %d: %v", i, err)
				return
			}
		}
		require.Fail(t, "10000 writes of 16 KiB and Redis never refused one: is maxmemory set?")
	}
}

// sampled is one sample of a gauge or counter and its labels.
type sampled struct {
	labels map[string]string
	value  float64
}

// scrape returns the metrics e serves now, by name: each family's first
// sample.
func scrape(t *testing.T, e *redistest.Exporter) map[string]*sampled {
	t.Helper()
	families, err := metricstest.Parse(e.Metrics(t))
	require.NoError(t, err)
	out := map[string]*sampled{}
	for name, f := range families {
		s := &sampled{labels: map[string]string{}}
		if ms := f.GetMetric(); len(ms) > 0 {
			m := ms[0]
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			s.value = metricstest.SampleValue(m)
		}
		out[name] = s
	}
	return out
}

// labelSet writes sets' labels (later ones win) as a series selector.
func labelSet(sets ...map[string]string) string {
	all := map[string]string{}
	for _, s := range sets {
		for k, v := range s {
			all[k] = v
		}
	}
	keys := make([]string, 0, len(all))
	for k := range all {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(all[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// dashboardQueries is every query of the committed dashboard.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	return metricnames.DashboardQueries(t, b)
}
