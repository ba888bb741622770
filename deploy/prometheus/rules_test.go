// Package prometheus_test checks the alerting rules in alerts.yaml: promtool
// accepts them and passes their unit tests (alerts_test.yaml), every alert
// links a runbook section of docs/OPERATIONS.md that exists, every
// metric the rules and runbooks name is one the binaries register (or one
// listed as pending, until they do), and every redis_ metric the rules and
// the Grafana dashboard read is one a real redis_exporter exposes
// (redis_test.go).
package prometheus_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/headcount/headcount/internal/markdown"
	"github.com/headcount/headcount/internal/metricnames"
)

const (
	rulesFile  = "alerts.yaml"
	testsFile  = "alerts_test.yaml"
	operations = "../../docs/OPERATIONS.md"
	// runbookBase is where every alert's runbook_url points, before the
	// section's anchor.
	runbookBase = "https://github.com/headcount/headcount/blob/main/docs/OPERATIONS.md#"
	// runbooksHeading is the section of operations holding one ### section
	// per alert.
	runbooksHeading = "## Alert runbooks"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alerts reads the alerting rules of alerts.yaml.
func alerts(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: only alerting rules here (record: %q)", g.Name, r.Record)
			out = append(out, r)
		}
	}
	require.NotEmpty(t, out, "no alerts in %s", rulesFile)
	return out
}

// TestRules runs Debian's promtool (package prometheus) on the rules and
// their unit tests.
func TestRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed, so the alerting rules cannot be checked: install Debian's prometheus package "+
			"(make deps does: sudo bash scripts/ensure-deps.sh), or put promtool on PATH (%v)", err)
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", testsFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// severities are the severity labels kube-prometheus-stack's Alertmanager
// routes and inhibitions match.
var severities = []string{"critical", "warning", "info"}

// TestAlertsHaveRunbooks: every alert has one of severities, a static
// summary (no template: pods' addresses and values go in the description)
// and a description, and a runbook_url whose anchor is the
// GitHub anchor of a ### section named after it in docs/OPERATIONS.md's
// runbooks; and every such section is an alert's.
func TestAlertsHaveRunbooks(t *testing.T) {
	b, err := os.ReadFile(operations)
	require.NoError(t, err)
	sections := runbookSections(t, string(b))
	seen := map[string]bool{}
	for _, r := range alerts(t) {
		require.Contains(t, severities, r.Labels["severity"], "%s: severity", r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
		require.NotContains(t, r.Annotations["summary"], "{{", "%s: summary is not static", r.Alert)
		require.NotEmpty(t, r.Annotations["description"], "%s: description", r.Alert)
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		require.True(t, ok, "%s: runbook_url %q does not start with %s", r.Alert, url, runbookBase)
		s, ok := sections[r.Alert]
		require.True(t, ok, "%s: no \"### %s\" section under %q in %s", r.Alert, r.Alert, runbooksHeading, operations)
		require.Equal(t, s.anchor, anchor, "%s: runbook_url's anchor is not its section's", r.Alert)
		require.NotEmpty(t, strings.TrimSpace(s.body), "%s: its runbook section is empty", r.Alert)
		seen[r.Alert] = true
	}
	for name := range sections {
		require.True(t, seen[name], "runbook section %q is no alert's", name)
	}
}

type section struct{ anchor, body string }

// runbookSections returns the ### sections of the runbooks section of the
// markdown doc, by heading, with the anchor GitHub gives each.
func runbookSections(t *testing.T, doc string) map[string]section {
	t.Helper()
	out := map[string]section{}
	in, found := false, false
	for _, h := range markdown.Headings(doc) {
		switch {
		case h.Level == 2 && "## "+h.Text == runbooksHeading:
			in, found = true, true
		case h.Level <= 2:
			in = false
		case in && h.Level == 3:
			_, dup := out[h.Text]
			require.False(t, dup, "two runbook sections %q", h.Text)
			out[h.Text] = section{anchor: h.Anchor, body: h.Body}
		}
	}
	require.True(t, found, "%s has no %q section", operations, runbooksHeading)
	return out
}

// metricName is a headcount metric's name where an expression or a runbook
// uses it.
var metricName = regexp.MustCompile(`\bheadcount_[a-z0-9_]*[a-z0-9]\b`)

// pending are metrics the rules use before the binaries register them,
// each with the change adding it; a pending metric that is registered
// fails the test, so the list does not outlive its reason.
var pending = map[string]string{}

// TestRuleMetricsExist: every headcount metric the rules' expressions and
// the runbooks name is registered by wsnode, cleaner or httpapi, or is
// pending; metricstest builds the binaries and looks the names up.
func TestRuleMetricsExist(t *testing.T) {
	bins := metricnames.Build(t)
	used := map[string][]string{} // name -> where
	for _, r := range alerts(t) {
		for _, name := range metricName.FindAllString(r.Expr, -1) {
			used[name] = append(used[name], r.Alert)
		}
	}
	b, err := os.ReadFile(operations)
	require.NoError(t, err)
	for heading, s := range runbookSections(t, string(b)) {
		for _, name := range metricName.FindAllString(s.body, -1) {
			used[name] = append(used[name], "runbook "+heading)
		}
	}
	require.NotEmpty(t, used)
	for name, where := range used {
		if why, ok := pending[name]; ok {
			require.False(t, bins.Registered(t, name), "%s is registered now: remove it from pending (%s)", name, why)
			continue
		}
		require.True(t, bins.Registered(t, name), "%s (used by %s) is registered by no binary", name, strings.Join(slices.Compact(where), ", "))
	}
}
