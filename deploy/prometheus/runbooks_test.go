package prometheus_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// marks end a command the rules below let through: one for deploy/k8s's
// users, one for an object that is yours, not the chart's.
var marks = []string{"# deploy/k8s", "# yours, not the chart's"}

// undone are kubectl verbs whose change to a chart object the next helm
// upgrade or GitOps sync reverts: a change goes through the values.
var undone = regexp.MustCompile(`\bkubectl\b.*\s(patch|edit|apply|scale|set|replace|annotate|label|autoscale)\s`)

// redisExec is how a runbook runs redis-cli: in the chart's toolbox, or in
// the bundled Redis's pod.
var redisExec = regexp.MustCompile(`\bkubectl\b.*\sexec\s.*(deploy/\S*-toolbox|\S*-redis-0 -c redis)\s.*--\s+redis-cli\b`)

// codeOf returns the commands of a markdown doc: each fenced line (with
// its backslash continuations joined) and each inline code span.
func codeOf(doc string) []string {
	var out, prose []string
	fenced, cont := false, ""
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			prose = append(prose, l)
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimSpace(l), `\`); ok {
			cont += s + " "
			continue
		}
		out = append(out, cont+strings.TrimSpace(l))
		cont = ""
	}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(strings.Join(prose, " "), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestRunbooksChangeOnlyValues: no command in docs/OPERATIONS.md changes a
// chart object with kubectl (patch, edit, apply, scale, set, ...), which
// the next helm upgrade or GitOps sync undoes, and every redis-cli runs in
// the toolbox or the bundled Redis's pod (the images have no redis-cli and
// the NetworkPolicies admit no other pod), but for commands marked
// one of marks.
func TestRunbooksChangeOnlyValues(t *testing.T) {
	b, err := os.ReadFile(operations)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range codeOf(string(b)) {
		if c == "redis-cli" || slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(c, m) }) {
			continue // the tool's name, or a marked command
		}
		// kubectl apply -k is deploy/k8s's (kustomize) by its flag.
		if undone.MatchString(c) && !strings.Contains(c, "apply -k") {
			t.Errorf("a change a helm upgrade or a GitOps sync undoes (make it through the values, or mark it %q): %s", marks, c)
		}
		if strings.Contains(c, "redis-cli") {
			n++
			if !redisExec.MatchString(c) {
				t.Errorf("redis-cli with no place to run (kubectl exec deploy/<fullname>-toolbox or <fullname>-redis-0 -c redis, or mark it %q): %s", marks, c)
			}
		}
	}
	if n == 0 {
		t.Error("no redis-cli command found: the doc's code was not read")
	}
}
