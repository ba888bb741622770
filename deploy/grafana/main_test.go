package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/headcount/headcount/internal/metricnames"
)

// TestCommittedDashboardIsGenerated: headcount.json is what this program
// writes, so an edit made to the JSON alone is caught.
func TestCommittedDashboardIsGenerated(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("headcount.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/grafana/headcount.json differs from the generator's output: edit deploy/grafana/main.go, then run\n\tgo run ./deploy/grafana > deploy/grafana/headcount.json")
	}
}

// TestDashboardShape checks what an import needs and the generator could
// get wrong: unique panel ids, panels that do not overlap, every query on
// the datasource variable with a refId and an expression, and the
// variables the queries use.
func TestDashboardShape(t *testing.T) {
	b, err := render()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Panels        []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *ref   `json:"datasource"`
			GridPos    struct{ H, W, X, Y int }
			Targets    []struct {
				Datasource ref    `json:"datasource"`
				Expr       string `json:"expr"`
				RefID      string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name     string `json:"name"`
				Type     string `json:"type"`
				AllValue string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, schemaVersion %d: want a uid and a schema of Grafana 9 or later", d.UID, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && v.AllValue != ".*" {
			t.Errorf("variable %s: allValue %q, want .* (matches series without the label)", v.Name, v.AllValue)
		}
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable: %v", vars)
	}
	ids := map[int]string{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q runs past the grid's 24 columns", p.Title)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, taken := cells[[2]int{x, y}]; taken {
					t.Fatalf("panels %q and %q overlap at (%d, %d)", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != datasource || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %v, %d queries", p.Title, p.Datasource, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource != datasource || q.RefID == "" || q.Expr == "" {
				t.Errorf("panel %q: query %+v", p.Title, q)
			}
			for _, v := range []string{"namespace", "app", "node", "redis"} {
				if strings.Contains(q.Expr, "$"+v) && vars[v] != "query" {
					t.Errorf("panel %q uses $%s, which is not a variable", p.Title, v)
				}
			}
			// Redis's series are picked by $redis alone: its exporter may
			// be scraped in another namespace.
			if !strings.Contains(q.Expr, `namespace=~"$namespace"`) && !strings.Contains(q.Expr, `instance=~"$redis"`) {
				t.Errorf("panel %q: a query ignores the namespace: %s", p.Title, q.Expr)
			}
		}
	}
}

// external are the metrics the dashboard reads from other exporters than
// headcount's binaries, each with its source and why headcount cannot
// export it itself. redis_exporter's are also checked against a real
// exporter (deploy/prometheus, TestRedisExporterMetrics).
var external = map[string]string{
	"kube_pod_container_resource_limits":       "kube-state-metrics: a container's CPU and memory limits are the pod spec's; a process sees its cgroup at best",
	"kube_pod_container_status_restarts_total": "kube-state-metrics: the kubelet's restart count, a crash loop that never got scraped included",
	"redis_memory_used_bytes":                  "redis_exporter: Redis's INFO, which headcount does not scrape",
	"redis_memory_max_bytes":                   "redis_exporter: Redis's maxmemory",
	"redis_commands_processed_total":           "redis_exporter: Redis's INFO stats",
	"redis_commands_duration_seconds_total":    "redis_exporter: Redis's INFO commandstats",
	"redis_commands_total":                     "redis_exporter: Redis's INFO commandstats",
	"redis_connected_clients":                  "redis_exporter: Redis's INFO clients",
	"redis_blocked_clients":                    "redis_exporter: Redis's INFO clients",
	"redis_evicted_keys_total":                 "redis_exporter: Redis's INFO stats",
	"redis_expired_keys_total":                 "redis_exporter: Redis's INFO stats",
	"redis_connected_slaves":                   "redis_exporter: Redis's INFO replication",
	"redis_master_link_up":                     "redis_exporter: Redis's INFO replication, on a replica",
	"redis_cluster_state":                      "redis_exporter: CLUSTER INFO, on a Cluster node",
	"redis_up":                                 "redis_exporter: whether it reached Redis (the Redis variable's values)",
}

// TestDashboardMetricsExist: every metric a panel or a variable queries is
// registered by wsnode, cleaner or httpapi (as their mains build them,
// with the Go and process collectors), or is an external one; and every
// external one is still queried, so the list does not outlive its use.
func TestDashboardMetricsExist(t *testing.T) {
	bins := metricnames.Build(t)
	used := map[string]bool{}
	for _, expr := range dashboardQueries(t) {
		names := metricNames(expr)
		if len(names) == 0 && !strings.Contains(expr, "__name__") {
			t.Errorf("no metric found in %s", expr)
		}
		for _, name := range names {
			used[name] = true
			if _, ok := external[name]; ok {
				continue
			}
			if !bins.Registered(t, name) {
				t.Errorf("%s (in %s) is registered by no binary, and is not an external metric", name, expr)
			}
		}
	}
	for name := range external {
		if !used[name] {
			t.Errorf("external metric %s is queried by no panel: remove it from the list", name)
		}
	}
}

// TestMetricNames: what metricNames takes for a metric, and what not.
func TestMetricNames(t *testing.T) {
	got := metricNames(`max by (instance) (kube_pod_container_resource_limits{namespace=~"$namespace", resource="cpu"} * on (namespace, pod) group_left (instance) group by (namespace, pod, instance) (up{job="a"}))` +
		` or topk(10, rate(go_gc_duration_seconds_sum[$__rate_interval]) > bool 2^62) and on (x) up`)
	want := []string{"kube_pod_container_resource_limits", "up", "go_gc_duration_seconds_sum"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := metricNames(`label_values(redis_up{namespace=~"$namespace"}, instance)`); !slices.Equal(got, []string{"redis_up"}) {
		t.Errorf("a variable's query: got %v, want [redis_up]", got)
	}
}

// dashboardQueries is every query of the dashboard as render writes it.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := render()
	if err != nil {
		t.Fatal(err)
	}
	return metricnames.DashboardQueries(t, b)
}

var (
	promString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// Matchers, ranges and label lists hold label names, not metrics.
	promBraces   = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// label_values(selector, label): the label is no metric.
	promLabelArg = regexp.MustCompile(`,\s*\w+\s*\)\s*$`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}
)

// metricNames are the metric names of a PromQL expression, in order, each
// once: identifiers that are no function, keyword, label or number.
func metricNames(expr string) []string {
	if strings.HasPrefix(expr, "label_values(") {
		expr = promLabelArg.ReplaceAllString(expr, ")")
	}
	expr = promString.ReplaceAllString(expr, `""`)
	expr = promBraces.ReplaceAllString(expr, "")
	expr = promGrouping.ReplaceAllString(expr, "")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatch(expr, -1) {
		name := m[0]
		if m[1] != "" || slices.Contains(promKeywords, strings.ToLower(name)) || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}
