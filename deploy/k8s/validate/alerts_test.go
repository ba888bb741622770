package validate

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
)

// alertsFile is the plain rule file: the chart's rules rendered with the
// default values and scope all (its header says so).
const alertsFile = "../../prometheus/alerts.yaml"

// allScope renders the PrometheusRule as alertsFile holds it.
var allScope = []string{"--set", "prometheusRule.enabled=true,prometheusRule.scope=all"}

// ruleFile is a rule file's shape, in the order people read a rule.
type ruleFile struct {
	Groups []ruleFileGroup `yaml:"groups"`
}

type ruleFileGroup struct {
	Name  string         `yaml:"name"`
	Rules []ruleFileRule `yaml:"rules"`
}

type ruleFileRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

func toRuleFile(groups []RuleGroup) ruleFile {
	var f ruleFile
	for _, g := range groups {
		fg := ruleFileGroup{Name: g.Name}
		for _, r := range g.Rules {
			fg.Rules = append(fg.Rules, ruleFileRule{Alert: r.Alert, Expr: r.Expr.String(), For: r.For, Labels: r.Labels, Annotations: r.Annotations})
		}
		f.Groups = append(f.Groups, fg)
	}
	return f
}

// prometheusRule renders the chart with flags and returns its one
// PrometheusRule's groups, and the whole render.
func prometheusRule(t *testing.T, c *Chart, flags ...string) ([]RuleGroup, *Set) {
	t.Helper()
	docs, err := c.Render(ChartTarget{}, flags...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSet("chart", docs)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.PrometheusRules) != 1 {
		t.Fatalf("%d PrometheusRules in the render, want 1", len(s.PrometheusRules))
	}
	for _, err := range checkPrometheusRules(s) {
		t.Error(err)
	}
	return s.PrometheusRules[0].Spec.Groups, s
}

// TestAlertsFileIsChartRender: deploy/prometheus/alerts.yaml, which
// promtool's unit tests exercise, holds exactly the groups the chart
// renders with its defaults and scope all. The chart's template is where
// the rules are written (thresholds and for from values); with
// UPDATE_ALERTS=1 this test rewrites the file's groups from it, keeping
// the file's header.
func TestAlertsFileIsChartRender(t *testing.T) {
	groups, _ := prometheusRule(t, testChart(t), allScope...)
	want := toRuleFile(groups)
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("UPDATE_ALERTS") == "1" {
		header, _, ok := bytes.Cut(b, []byte("\ngroups:"))
		if !ok {
			t.Fatalf("%s has no groups:", alertsFile)
		}
		var out bytes.Buffer
		out.Write(header)
		out.WriteString("\n")
		enc := yaml.NewEncoder(&out)
		enc.SetIndent(2)
		if err := enc.Encode(want); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(alertsFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		b = out.Bytes()
	}
	var got ruleFile
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("%s is not the chart's rules rendered with %v (- chart, + file); rerun with UPDATE_ALERTS=1 to rewrite it:\n%s",
			alertsFile, allScope, diff.Diff(want, got))
	}
}

// headcountSelector is a headcount metric's name and its label matchers,
// if any, where an expression uses it.
var headcountSelector = regexp.MustCompile(`\bheadcount_[a-z0-9_]*[a-z0-9](\{[^}]*\})?`)

// TestChartPrometheusRuleValues renders the PrometheusRule with values
// that turn an alert off, change a threshold, a for and a severity, and
// map the severities; checks what comes out, and that promtool accepts
// the rules.
func TestChartPrometheusRuleValues(t *testing.T) {
	c := testChart(t)
	values := filepath.Join(t.TempDir(), "values.yaml")
	err := os.WriteFile(values, []byte(`
serviceMonitor:
  enabled: true
prometheusRule:
  enabled: true
  severities: {critical: page, warning: ticket}
  alerts:
    HeadcountHTTPAPISlow: {enabled: false}
    HeadcountWsnodeNearSocketCap: {threshold: 0.75, for: 10m}
    HeadcountCountDrift: {severity: critical}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	groups, s := prometheusRule(t, c, "--values", values)
	rules := map[string]Rule{}
	for _, g := range groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}
	defaults, _ := prometheusRule(t, c, "--set", "prometheusRule.enabled=true")
	for _, g := range defaults {
		for _, r := range g.Rules {
			if _, ok := rules[r.Alert]; !ok && r.Alert != "HeadcountHTTPAPISlow" {
				t.Errorf("%s is missing", r.Alert)
			}
		}
	}
	if _, ok := rules["HeadcountHTTPAPISlow"]; ok {
		t.Error("HeadcountHTTPAPISlow is rendered although turned off")
	}
	capRule := rules["HeadcountWsnodeNearSocketCap"]
	if !strings.HasSuffix(capRule.Expr.String(), "> 0.75") || capRule.For != "10m" || !strings.Contains(capRule.Annotations["description"], "more than 0.75") {
		t.Errorf("HeadcountWsnodeNearSocketCap: expr %q, for %q, description %q; want the threshold 0.75 and for 10m",
			capRule.Expr.String(), capRule.For, capRule.Annotations["description"])
	}
	for name, want := range map[string]string{"HeadcountCountDrift": "page", "HeadcountNoWsnodeReady": "page", "HeadcountWsnodeNotReady": "ticket", "HeadcountAppsOutOfSync": "ticket"} {
		if got := rules[name].Labels["severity"]; got != want {
			t.Errorf("%s: severity %q, want %q", name, got, want)
		}
	}

	// Scope release: every headcount series is the release's own. The job
	// is the one the ServiceMonitor gives: the name of the Service it
	// selects.
	var job string
	for _, svc := range s.Services {
		if slices.ContainsFunc(s.ServiceMonitors, func(m *ServiceMonitor) bool {
			return m.Spec.Selector.MatchLabels["app.kubernetes.io/name"] == svc.Labels["app.kubernetes.io/name"]
		}) {
			job = svc.Name
		}
	}
	if job == "" {
		t.Fatal("no Service is selected by the ServiceMonitor")
	}
	own := `namespace="` + c.Namespace + `", job="` + job + `"`
	for name, r := range rules {
		for _, sel := range headcountSelector.FindAllString(r.Expr.String(), -1) {
			if !strings.Contains(sel, own) {
				t.Errorf("%s: %s does not select the release's own series (%s)", name, sel, own)
			}
		}
	}
	// The Deployments and container the rules name are the chart's.
	for name, r := range rules {
		for _, m := range regexp.MustCompile(`deployment=~?"([^"]*)"`).FindAllStringSubmatch(r.Expr.String(), -1) {
			for _, d := range strings.Split(m[1], "|") {
				if s.Deployment(d) == nil {
					t.Errorf("%s names Deployment %s, which the chart does not make", name, d)
				}
			}
		}
		for _, m := range regexp.MustCompile(`container="([^"]*)"`).FindAllStringSubmatch(r.Expr.String(), -1) {
			if !slices.ContainsFunc(s.Deployments, func(d *appsv1.Deployment) bool { return d.Spec.Template.Spec.Containers[0].Name == m[1] }) {
				t.Errorf("%s names container %s, which is no Deployment's container of that name", name, m[1])
			}
		}
	}

	promtool(t, "check", "rules", writeRules(t, "rules.yaml", groups))
}

// TestChartRulesPerRelease: two releases in two namespaces share a
// Prometheus (each release's PrometheusRule loaded); every target of prod
// is gone while staging is healthy. prod's rules page once, for prod;
// staging's stay quiet (with scope all, both would page for prod).
func TestChartRulesPerRelease(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, ns := range []string{"prod", "staging"} {
		c := *testChart(t)
		c.Namespace = ns
		groups, _ := prometheusRule(t, &c, "--set", "prometheusRule.enabled=true,serviceMonitor.enabled=true")
		// Which alerts fire is the point here, not their texts.
		for i := range groups {
			for j := range groups[i].Rules {
				groups[i].Rules[j].Annotations = nil
			}
		}
		files = append(files, writeRules(t, filepath.Join(dir, ns+".yaml"), groups))
	}
	series := ""
	for _, ns := range []string{"prod", "staging"} {
		values := "1x40"
		if ns == "prod" {
			values = "1x4 stale"
		}
		for _, m := range []string{"headcount_wsnode_ready", "headcount_wsnode_connections_open", "headcount_cleaner_active", "headcount_httpapi_ready", "headcount_httpapi_redis_up"} {
			series += "      - series: '" + m + `{namespace="` + ns + `", job="headcount-metrics", pod="p"}'` + "\n        values: '" + values + "'\n"
		}
		// The release's Deployments: <fullname>-<binary>, and the release
		// "headcount" is its own fullname.
		for _, d := range []string{"wsnode", "cleaner", "httpapi"} {
			series += `      - series: 'kube_deployment_spec_replicas{namespace="` + ns + `", deployment="headcount-` + d + `"}'` + "\n        values: '2x40'\n"
		}
	}
	var expect strings.Builder
	for _, a := range []string{"HeadcountNoWsnodeReady", "HeadcountNoActiveCleaner", "HeadcountNoHTTPAPIReady"} {
		expect.WriteString("      - eval_time: 5m\n        alertname: " + a + "\n        exp_alerts:\n          - exp_labels: {severity: critical, namespace: prod}\n")
	}
	tests := "rule_files: [" + strings.Join(files, ", ") + "]\nevaluation_interval: 30s\ntests:\n  - interval: 15s\n    input_series:\n" +
		series + "    alert_rule_test:\n" + expect.String()
	path := filepath.Join(dir, "tests.yaml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "test", "rules", path)
}

// writeRules writes groups as a rule file (to name, or under a temporary
// directory if it is relative) and returns its path.
func writeRules(t *testing.T, name string, groups []RuleGroup) string {
	t.Helper()
	if !filepath.IsAbs(name) {
		name = filepath.Join(t.TempDir(), name)
	}
	b, err := yaml.Marshal(toRuleFile(groups))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// promtool runs Debian's promtool (package prometheus, which make test
// installs); without it the test fails rather than skips.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed: install Debian's prometheus package (make deps does), or put promtool on PATH (%v)", err)
	}
	out, err := exec.Command(p, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
