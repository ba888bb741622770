package validate

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The chart's targets, as Chart.Targets names them.
const (
	chartDefaults = "helm headcount"
	chartAppsDB   = "helm headcount -f examples/apps-db.yaml"
	chartCluster  = "helm headcount -f examples/redis-cluster.yaml"
	chartSentinel = "helm headcount -f examples/sentinel-tls.yaml"
	chartSingle   = "helm headcount -f examples/single-redis.yaml"
)

// testChart is the chart with the helm binary named by $HELM: make
// k8s-validate builds the pinned one and sets it. Without it the chart's
// tests fail rather than skip, so they never pass unseen.
func testChart(t *testing.T) *Chart {
	t.Helper()
	h := os.Getenv("HELM")
	if h == "" {
		t.Fatal("HELM is not set: run make k8s-validate (it builds the pinned helm and sets HELM), or HELM=/path/to/helm go test .")
	}
	return &Chart{Helm: h, Dir: filepath.Join("..", "..", "helm", "headcount"), Release: "headcount", Namespace: "headcount"}
}

var (
	chartOnce     sync.Once
	chartRendered map[string][][]byte
	chartErr      error
)

// chartDocs renders every chart target once per test binary, with what the
// examples expect to exist first (ChartGiven).
func chartDocs(t *testing.T, target string) [][]byte {
	t.Helper()
	c := testChart(t)
	chartOnce.Do(func() {
		given, err := LoadChartGiven("..")
		if err != nil {
			chartErr = err
			return
		}
		targets, err := c.Targets()
		if err != nil {
			chartErr = err
			return
		}
		chartRendered = map[string][][]byte{}
		for _, tg := range targets {
			d, err := c.Render(tg)
			if err != nil {
				chartErr = err
				return
			}
			chartRendered[tg.Name] = append(append([][]byte{}, given...), d...)
		}
	})
	if chartErr != nil {
		t.Fatal(chartErr)
	}
	d, ok := chartRendered[target]
	if !ok {
		t.Fatalf("no chart target %s", target)
	}
	return d
}

// renderChart renders the chart alone (no given objects) with extra flags.
func renderChart(t *testing.T, values string, extra ...string) *Set {
	t.Helper()
	c := testChart(t)
	docs, err := c.Render(ChartTarget{Name: "helm " + values, Values: values}, extra...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSet("chart", docs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func renderKustomize(t *testing.T, tg Target) *Set {
	t.Helper()
	tree, err := LoadTree("..")
	if err != nil {
		t.Fatal(err)
	}
	s, err := tree.RenderSet(tg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChartTargetsPass: helm lint --strict, and every check, on the
// defaults and each example.
func TestChartTargetsPass(t *testing.T) {
	c := testChart(t)
	targets, err := c.Targets()
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) < 5 {
		t.Fatalf("want the defaults and at least four examples, have %v", targets)
	}
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			if err := c.Lint(tg); err != nil {
				t.Fatal(err)
			}
			for _, err := range load(t, tg.Name).Check() {
				t.Error(err)
			}
		})
	}
}

// TestChartMatchesKustomize is the drift test: the chart's defaults render
// what overlays/single-redis does, examples/redis-cluster.yaml what
// overlays/redis-cluster does, and the optional ingress and ServiceMonitor
// what the components add, object for object, on everything that decides
// how the binaries run (drift lists it).
func TestChartMatchesKustomize(t *testing.T) {
	cases := []struct {
		name, values string
		extra        []string
		kustomize    Target
	}{
		{"defaults", "", nil, Target{Name: single, Overlay: single}},
		{"redis-cluster", "examples/redis-cluster.yaml", nil, Target{Name: cluster, Overlay: cluster}},
		{"ingress and servicemonitor", "", []string{"--set", "ingress.enabled=true,serviceMonitor.enabled=true"},
			Target{Name: single + "+components", Overlay: single, Components: []string{"components/ingress", "components/servicemonitor"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := renderChart(t, c.values, c.extra...)
			ku := renderKustomize(t, c.kustomize)
			for _, d := range drift(ch, ku) {
				t.Error(d)
			}
		})
	}
}

// TestDriftCaught shows the drift test failing: the chart's defaults
// changed in memory, one way at a time.
func TestDriftCaught(t *testing.T) {
	cases := []struct {
		name, want string
		mutate     func(s *Set)
	}{
		{"readiness probe period", "Deployment/wsnode: pod spec differs", func(s *Set) {
			s.Deployment("headcount-wsnode").Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds = 3
		}},
		{"termination grace", "Deployment/wsnode: pod spec differs", func(s *Set) {
			s.Deployment("headcount-wsnode").Spec.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(40))
		}},
		{"preStop", "Deployment/httpapi: pod spec differs", func(s *Set) {
			s.Deployment("headcount-httpapi").Spec.Template.Spec.Containers[0].Lifecycle = nil
		}},
		{"image", "Deployment/cleaner: pod spec differs", func(s *Set) {
			s.Deployment("headcount-cleaner").Spec.Template.Spec.Containers[0].Image = "headcount:other"
		}},
		{"drain", "ConfigMap/wsnode-config: data differs", func(s *Set) {
			s.ConfigMap("headcount-wsnode-config").Data["HEADCOUNT_DRAIN"] = "10s"
		}},
		{"PDB", "PodDisruptionBudget/wsnode: spec differs", func(s *Set) {
			for _, p := range s.PDBs {
				if p.Name == "headcount-wsnode" {
					p.Spec.MaxUnavailable = ptr(intstr.FromInt32(2))
				}
			}
		}},
		{"HPA", "HorizontalPodAutoscaler/wsnode: spec differs", func(s *Set) {
			for _, h := range s.HPAs {
				if h.Name == "headcount-wsnode" {
					h.Spec.MaxReplicas = 10
				}
			}
		}},
		{"a pod label lost", `Deployment/httpapi: pod label app.kubernetes.io/component`, func(s *Set) {
			delete(s.Deployment("headcount-httpapi").Spec.Template.Labels, "app.kubernetes.io/component")
		}},
		{"an object lost", "NetworkPolicy/metrics-ingress: in the kustomize render only", func(s *Set) {
			*s = *without(s, "NetworkPolicy", "headcount-metrics-ingress")
		}},
	}
	ku := renderKustomize(t, Target{Name: single, Overlay: single})
	if d := drift(renderChart(t, ""), ku); len(d) > 0 {
		t.Fatalf("the unchanged chart drifts already: %v", d)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch := renderChart(t, "")
			c.mutate(ch)
			d := drift(ch, ku)
			for _, msg := range d {
				if strings.Contains(msg, c.want) {
					return
				}
			}
			t.Fatalf("drift did not report %q; it reported %v", c.want, d)
		})
	}
}

// kustomizeHash is the suffix kustomize's generators add to a ConfigMap's
// or a Secret's name.
var kustomizeHash = regexp.MustCompile(`^(.+)-[a-z0-9]{10}$`)

// drift compares a chart render with a kustomize render and lists what
// differs: the same objects (by kind and name, kustomize's generated names
// without their hash; the Namespace aside, which the chart expects to
// exist); each label kustomize sets, set alike by the chart; and, object
// by object, the whole pod spec of each workload (images, commands, env,
// ports, probes, preStop, termination grace, resources, security contexts,
// spread, volumes), the workloads' replicas, strategies and selectors,
// ConfigMap data (the HEADCOUNT_* settings), the apps Secret's apps, and
// the whole spec of Services, PDBs, HPAs, NetworkPolicies, Ingresses and
// ServiceMonitors. The chart's own annotations and labels beyond
// kustomize's do not count.
func drift(ch, ku *Set) []string {
	ch, ku = onPurpose(ch, ku)
	var out []string
	rename := map[string]string{}
	for _, o := range ku.Objects {
		if m := kustomizeHash.FindStringSubmatch(o.Name); m != nil && (o.Kind == "ConfigMap" || o.Kind == "Secret") {
			rename[o.Name] = m[1]
		}
	}
	base := func(name string) string {
		if b, ok := rename[name]; ok {
			return b
		}
		return name
	}
	same := func(what string, k, c any) {
		if !equality.Semantic.DeepEqual(k, c) {
			out = append(out, fmt.Sprintf("%s differs (- kustomize, + chart):\n%s", what, diff.Diff(k, c)))
		}
	}
	chartObjs := map[string]*Object{}
	for _, o := range ch.Objects {
		chartObjs[o.Kind+"/"+o.Name] = o
	}
	seen := map[string]bool{}
	for _, k := range ku.Objects {
		if k.Kind == "Namespace" {
			continue
		}
		id := k.Kind + "/" + base(k.Name)
		seen[id] = true
		c, ok := chartObjs[id]
		if !ok {
			out = append(out, id+": in the kustomize render only")
			continue
		}
		km, cm := k.Typed.(metav1.Object), c.Typed.(metav1.Object)
		out = append(out, missingLabels(id, km.GetLabels(), cm.GetLabels())...)
		out = append(out, driftOf(id, k.Typed, c.Typed, base, same)...)
	}
	for id := range chartObjs {
		if !seen[id] {
			out = append(out, id+": in the chart render only")
		}
	}
	sort.Strings(out)
	return out
}

// chartPrefix is what the chart puts before each object's name when
// rendered as the release "headcount" (testChart): its fullname and a dash.
const chartPrefix = "headcount-"

// chartRedisSecret is the Secret the chart generates for its single
// Redis's password, named with chartPrefix.
const chartRedisSecret = chartPrefix + "redis-auth"

// onPurpose undoes, in copies of both renders, where the chart differs
// from the overlays on purpose, so that drift compares the rest:
//   - Names. The chart starts each object's name with the release's, so
//     releases share a namespace; the overlays' names are fixed. A chart
//     name (or a reference to one, Redis's URL among them) that is a
//     kustomize name once chartPrefix is dropped counts as that name.
//   - app.kubernetes.io/instance. The chart puts the release in every
//     selector and pod label; the overlays keep their selectors as they
//     were (a Deployment's selector is immutable) and label their Redis
//     headcount-redis. It is dropped on both sides.
//   - The audit CronJobs, the chart's alone: deploy/k8s users run
//     cleaner audit in a cleaner pod (docs/OPERATIONS.md).
//   - The single Redis's password. The chart generates one and its Redis
//     requires it; overlays/single-redis's Redis has none, and its
//     NetworkPolicy alone guards it. The chart's Secret, the env vars that
//     read it, the binaries' mount of it (and the variable naming the
//     file) and Redis's --requirepass are dropped, and so is the overlay's
//     --protected-mode no (moot once there is a password).
func onPurpose(ch, ku *Set) (*Set, *Set) {
	names := map[string]bool{}
	for _, o := range ku.Objects {
		name := o.Name
		if m := kustomizeHash.FindStringSubmatch(name); m != nil && (o.Kind == "ConfigMap" || o.Kind == "Secret") {
			name = m[1]
		}
		names[name] = true
	}
	rename := func(v string) string {
		if b, ok := strings.CutPrefix(v, chartPrefix); ok && !names[v] && names[b] {
			return b
		}
		if u, err := url.Parse(v); err == nil && u.Scheme == "redis" && u.Port() != "" {
			if b, ok := strings.CutPrefix(u.Hostname(), chartPrefix); ok && names[b] {
				u.Host = b + ":" + u.Port()
				return u.String()
			}
		}
		return v
	}
	return normalizeSet(ch, rename), normalizeSet(ku, func(v string) string { return v })
}

func normalizeSet(s *Set, rename func(string) string) *Set {
	out := &Set{Target: s.Target}
	for _, o := range s.Objects {
		if o.Kind == "Secret" && o.Name == chartRedisSecret || o.Kind == "CronJob" {
			continue
		}
		j, err := json.Marshal(o.Typed)
		if err != nil {
			panic(err)
		}
		var m any
		if err := json.Unmarshal(j, &m); err != nil {
			panic(err)
		}
		j, err = json.Marshal(normalizeValue(m, rename))
		if err != nil {
			panic(err)
		}
		n, err := DecodeObject(j)
		if err != nil {
			panic(fmt.Sprintf("%s: %v", o.ID(), err))
		}
		out.Add(n)
	}
	return out
}

func normalizeValue(v any, rename func(string) string) any {
	switch t := v.(type) {
	case string:
		return rename(t)
	case map[string]any:
		delete(t, "app.kubernetes.io/instance")
		for k, x := range t {
			t[k] = normalizeValue(x, rename)
		}
		if args, ok := t["args"].([]any); ok {
			t["args"] = withoutFlags(args, "--requirepass", "--protected-mode")
		}
		if env, ok := t["env"].([]any); ok {
			t["env"] = slices.DeleteFunc(env, func(e any) bool {
				em, _ := e.(map[string]any)
				from, _ := em["valueFrom"].(map[string]any)
				ref, _ := from["secretKeyRef"].(map[string]any)
				return ref["name"] == chartRedisSecret || em["name"] == "HEADCOUNT_REDIS_PASSWORD_FILE"
			})
		}
		for _, list := range []string{"volumes", "volumeMounts"} {
			if vs, ok := t[list].([]any); ok {
				if vs = slices.DeleteFunc(vs, func(v any) bool {
					vm, _ := v.(map[string]any)
					return vm["name"] == "redis-password"
				}); len(vs) == 0 {
					delete(t, list)
				} else {
					t[list] = vs
				}
			}
		}
		return t
	case []any:
		for i := range t {
			t[i] = normalizeValue(t[i], rename)
		}
		return t
	}
	return v
}

// withoutFlags drops each of flags and the value after it.
func withoutFlags(args []any, flags ...string) []any {
	var out []any
	for i := 0; i < len(args); i++ {
		if f, _ := args[i].(string); slices.Contains(flags, f) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

func missingLabels(id string, k, c map[string]string) []string {
	var out []string
	for key, v := range k {
		if c[key] != v {
			out = append(out, fmt.Sprintf("%s: label %s=%s is %q in the chart", id, key, v, c[key]))
		}
	}
	return out
}

// normalizePod copies a pod template's spec with kustomize's generated
// names replaced by their bases.
func normalizePod(p corev1.PodSpec, base func(string) string) corev1.PodSpec {
	p = *p.DeepCopy()
	for i := range p.Volumes {
		if s := p.Volumes[i].Secret; s != nil {
			s.SecretName = base(s.SecretName)
		}
		if c := p.Volumes[i].ConfigMap; c != nil {
			c.Name = base(c.Name)
		}
	}
	for _, cs := range [][]corev1.Container{p.InitContainers, p.Containers} {
		for i := range cs {
			for j := range cs[i].EnvFrom {
				if r := cs[i].EnvFrom[j].ConfigMapRef; r != nil {
					r.Name = base(r.Name)
				}
				if r := cs[i].EnvFrom[j].SecretRef; r != nil {
					r.Name = base(r.Name)
				}
			}
			for j := range cs[i].Env {
				if vf := cs[i].Env[j].ValueFrom; vf != nil && vf.SecretKeyRef != nil {
					vf.SecretKeyRef.Name = base(vf.SecretKeyRef.Name)
				}
				if vf := cs[i].Env[j].ValueFrom; vf != nil && vf.ConfigMapKeyRef != nil {
					vf.ConfigMapKeyRef.Name = base(vf.ConfigMapKeyRef.Name)
				}
			}
		}
	}
	return p
}

func driftPod(id string, k, c *corev1.PodTemplateSpec, base func(string) string, same func(string, any, any)) []string {
	out := missingLabels(id+": pod", k.Labels, c.Labels)
	for i := range out {
		out[i] = strings.Replace(out[i], ": pod: label", ": pod label", 1)
	}
	ka := map[string]string{}
	for key, v := range c.Annotations {
		if key != "checksum/config" {
			ka[key] = v
		}
	}
	if len(k.Annotations)+len(ka) > 0 {
		same(id+": pod annotations", k.Annotations, ka)
	}
	same(id+": pod spec", normalizePod(k.Spec, base), normalizePod(c.Spec, base))
	return out
}

func driftOf(id string, k, c any, base func(string) string, same func(string, any, any)) []string {
	var out []string
	switch kt := k.(type) {
	case *corev1.ConfigMap:
		ct := c.(*corev1.ConfigMap)
		same(id+": data", kt.Data, ct.Data)
		same(id+": binaryData", kt.BinaryData, ct.BinaryData)
	case *corev1.Secret:
		ct := c.(*corev1.Secret)
		same(id+": type", kt.Type, ct.Type)
		same(id+": keys", sortedKeys(kt.Data), sortedKeys(ct.Data))
		for key, v := range kt.Data {
			var kj, cj any
			// The apps: the same JSON, however formatted.
			if json.Unmarshal(v, &kj) == nil && json.Unmarshal(ct.Data[key], &cj) == nil {
				same(id+": "+key+" (JSON)", kj, cj)
			} else {
				same(id+": "+key, string(v), string(ct.Data[key]))
			}
		}
	case *corev1.ServiceAccount:
		same(id+": automountServiceAccountToken", kt.AutomountServiceAccountToken, c.(*corev1.ServiceAccount).AutomountServiceAccountToken)
	case *corev1.Service:
		same(id+": spec", kt.Spec, c.(*corev1.Service).Spec)
	case *appsv1.Deployment:
		ct := c.(*appsv1.Deployment)
		same(id+": replicas", kt.Spec.Replicas, ct.Spec.Replicas)
		same(id+": revisionHistoryLimit", kt.Spec.RevisionHistoryLimit, ct.Spec.RevisionHistoryLimit)
		same(id+": strategy", kt.Spec.Strategy, ct.Spec.Strategy)
		same(id+": selector", kt.Spec.Selector, ct.Spec.Selector)
		out = append(out, driftPod(id, &kt.Spec.Template, &ct.Spec.Template, base, same)...)
	case *appsv1.StatefulSet:
		ct := c.(*appsv1.StatefulSet)
		same(id+": replicas", kt.Spec.Replicas, ct.Spec.Replicas)
		same(id+": serviceName", kt.Spec.ServiceName, ct.Spec.ServiceName)
		same(id+": selector", kt.Spec.Selector, ct.Spec.Selector)
		var kv, cv []corev1.PersistentVolumeClaimSpec
		for _, v := range kt.Spec.VolumeClaimTemplates {
			kv = append(kv, v.Spec)
		}
		for _, v := range ct.Spec.VolumeClaimTemplates {
			cv = append(cv, v.Spec)
		}
		same(id+": volumeClaimTemplates", kv, cv)
		out = append(out, driftPod(id, &kt.Spec.Template, &ct.Spec.Template, base, same)...)
	case *autoscalingv2.HorizontalPodAutoscaler:
		same(id+": spec", kt.Spec, c.(*autoscalingv2.HorizontalPodAutoscaler).Spec)
	case *policyv1.PodDisruptionBudget:
		same(id+": spec", kt.Spec, c.(*policyv1.PodDisruptionBudget).Spec)
	case *networkingv1.NetworkPolicy:
		same(id+": spec", kt.Spec, c.(*networkingv1.NetworkPolicy).Spec)
	case *networkingv1.Ingress:
		ct := c.(*networkingv1.Ingress)
		same(id+": annotations", kt.Annotations, ct.Annotations)
		same(id+": spec", kt.Spec, ct.Spec)
	case *ServiceMonitor:
		same(id+": spec", kt.Spec, c.(*ServiceMonitor).Spec)
	default:
		out = append(out, fmt.Sprintf("%s: drift does not know how to compare a %T", id, k))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// chartFiles are the chart's links to files that live elsewhere in the
// repository, so each fact has one place. The alerting rules are not one:
// the chart templates them (templates/_alerts.tpl), and
// TestAlertsFileIsChartRender keeps deploy/prometheus/alerts.yaml its
// render.
var chartFiles = map[string]string{
	"files/headcount.json": "../../../grafana/headcount.json",
}

// TestChartFilesAreLinks: the chart's dashboard is a symbolic link, not a
// copy that could drift from the original.
func TestChartFilesAreLinks(t *testing.T) {
	dir := testChart(t).Dir
	for f, want := range chartFiles {
		got, err := os.Readlink(filepath.Join(dir, f))
		if err != nil || got != want {
			t.Errorf("%s: link to %q (%v), want a link to %s", f, got, err, want)
		}
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// findDoc returns the rendered document of kind/name as a generic map.
func findDoc(t *testing.T, docs [][]byte, kind, name string) map[string]any {
	t.Helper()
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal(d, &m); err != nil {
			t.Fatal(err)
		}
		md, _ := m["metadata"].(map[string]any)
		if m["kind"] == kind && md["name"] == name {
			return m
		}
	}
	t.Fatalf("no %s/%s in the render", kind, name)
	return nil
}

// monitoringFlags turns on the PrometheusRule and the dashboard.
var monitoringFlags = []string{"--set", "prometheusRule.enabled=true,grafanaDashboard.enabled=true"}

// checkDashboard requires the dashboard ConfigMap to hold the dashboard.
func checkDashboard(t *testing.T, docs [][]byte, dashboard []byte) {
	t.Helper()
	data, _ := findDoc(t, docs, "ConfigMap", "headcount-dashboard")["data"].(map[string]any)
	got, _ := data["headcount.json"].(string)
	if got != strings.TrimRight(string(dashboard), "\n") {
		t.Errorf("the dashboard ConfigMap holds %.200q, not the dashboard file", got)
	}
	var js any
	if err := json.Unmarshal([]byte(got), &js); err != nil {
		t.Errorf("the dashboard ConfigMap's JSON: %v", err)
	}
}

// TestChartDashboard: the dashboard ConfigMap holds exactly
// deploy/grafana/headcount.json, read through the link; and a dashboard
// with content that looks like a template (Grafana's ${datasource}, braces
// in a title) passes through unchanged: helm does not template what
// .Files.Get reads.
func TestChartDashboard(t *testing.T) {
	c := testChart(t)
	t.Run("the repository's file", func(t *testing.T) {
		docs, err := c.Render(ChartTarget{}, monitoringFlags...)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile("../../grafana/headcount.json")
		if err != nil {
			t.Fatal(err)
		}
		checkDashboard(t, docs, b)
	})
	t.Run("a file with content", func(t *testing.T) {
		dashboard := []byte(`{"title": "headcount", "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
  "panels": [{"title": "{{ not a helm template }}", "datasource": "${datasource}"}]}
`)
		dir := copyChart(t, c.Dir)
		if err := os.WriteFile(filepath.Join(dir, "files", "headcount.json"), dashboard, 0o644); err != nil {
			t.Fatal(err)
		}
		cc := *c
		cc.Dir = dir
		docs, err := cc.Render(ChartTarget{}, monitoringFlags...)
		if err != nil {
			t.Fatal(err)
		}
		checkDashboard(t, docs, dashboard)
	})
}

// copyChart copies the chart, its links resolved, into a temporary
// directory.
func copyChart(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "headcount")
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p) //nolint:gosec // G122: the repository's own chart, copied; ReadFile follows its links on purpose
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestChartPackage: helm package follows the links (the archive holds the
// files themselves), and the packaged chart renders what the directory
// does.
func TestChartPackage(t *testing.T) {
	c := testChart(t)
	out := t.TempDir()
	if _, err := c.run("package", c.Dir, "--destination", out); err != nil {
		t.Fatal(err)
	}
	tgz, err := filepath.Glob(filepath.Join(out, "headcount-*.tgz"))
	if err != nil || len(tgz) != 1 {
		t.Fatalf("package wrote %v (%v)", tgz, err)
	}
	files := readTarGz(t, tgz[0])
	for f, link := range chartFiles {
		want, err := os.ReadFile(filepath.Join(c.Dir, filepath.Dir(f), link))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := files["headcount/"+f]
		if !ok {
			t.Errorf("the archive has no headcount/%s", f)
		} else if string(got) != string(want) {
			t.Errorf("the archive's headcount/%s is not the file it links to", f)
		}
	}
	// A Redis password of its own: the generated one differs each render.
	flags := append([]string{"--set", "redis.password.existingSecret=headcount-redis"}, monitoringFlags...)
	fromDir, err := c.Render(ChartTarget{}, flags...)
	if err != nil {
		t.Fatal(err)
	}
	pc := *c
	pc.Dir = tgz[0]
	fromTgz, err := pc.Render(ChartTarget{}, flags...)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := string(joinDocs(fromDir)), string(joinDocs(fromTgz)); a != b {
		t.Errorf("the packaged chart renders otherwise (- directory, + archive):\n%s", diff.Diff(a, b))
	}
}

func joinDocs(docs [][]byte) []byte {
	var b []byte
	for _, d := range docs {
		b = append(append(b, "---\n"...), d...)
	}
	return b
}

func readTarGz(t *testing.T, p string) map[string][]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("archive entry %s is not a regular file (type %c)", h.Name, h.Typeflag)
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// TestChartRefuses: values that cannot work fail the render (the chart's
// checks and its values schema), naming the value.
func TestChartRefuses(t *testing.T) {
	c := testChart(t)
	cases := []struct {
		name string
		set  []string
		want string
	}{
		{"password in the Redis URL", []string{"redis.mode=url", "redis.url=redis://default:hunter2@redis.example.com:6379/0"}, "redis.url holds a password"},
		{"URL mode without a URL", []string{"redis.mode=url"}, "redis.url: a redis:// or rediss:// URL is required"},
		{"Cluster without seeds", []string{"redis.mode=cluster"}, "redis.cluster.seeds: at least one host:port"},
		{"a seed without a port", []string{"redis.mode=cluster", "redis.cluster.seeds={redis.example.com}"}, "/redis/cluster/seeds/0"},
		{"Sentinel without a master name", []string{"redis.mode=sentinel", "redis.sentinel.addresses={s:26379}"}, "redis.sentinel.masterName is required"},
		{"TLS to the single Redis", []string{"redis.tls.enabled=true"}, "the single Redis of mode single serves no TLS"},
		{"a client certificate without its key", []string{"redis.mode=cluster", "redis.cluster.seeds={r:6379}", "redis.tls.existingSecret=t", "redis.tls.certKey=tls.crt"}, "certKey and keyKey go together"},
		{"a TLS key without its Secret", []string{"redis.mode=cluster", "redis.cluster.seeds={r:6379}", "redis.tls.caKey=ca.crt"}, "redis.tls.existingSecret, which is empty"},
		{"a Redis setting in config", []string{"config.HEADCOUNT_REDIS=redis://r:6379/0"}, "config.HEADCOUNT_REDIS: the chart sets it; use redis.mode and redis.url"},
		{"a listen address in a binary's config", []string{"wsnode.config.HEADCOUNT_ADDR=:7000"}, "wsnode.config.HEADCOUNT_ADDR: the chart sets it"},
		{"an app secret in config", []string{"config.HEADCOUNT_APP_SECRET=s"}, "config.HEADCOUNT_APP_SECRET: the chart sets it"},
		{"apps database without its Secret", []string{"apps.source=database"}, "apps.database.existingSecret: the Secret holding the database URL is required"},
		{"no apps", []string{"apps.list=null"}, "apps.list is empty"},
		{"an unknown Redis mode", []string{"redis.mode=clustr"}, "/redis/mode"},
		{"a misspelt value", []string{"redis.mdoe=cluster"}, "additional properties 'mdoe' not allowed"},
		{"one cleaner", []string{"cleaner.replicas=1"}, "/cleaner/replicas"},
		{"a PDB with both bounds", []string{"wsnode.pdb.minAvailable=1"}, "/wsnode/pdb"},
		{"a misspelt alert", []string{"prometheusRule.enabled=true", "prometheusRule.alerts.HeadcountNoWsnodeRedy.enabled=false"}, "prometheusRule.alerts.HeadcountNoWsnodeRedy: no such alert"},
		{"an alert's unknown severity", []string{"prometheusRule.alerts.HeadcountCountDrift.severity=page"}, "/prometheusRule/alerts/HeadcountCountDrift/severity"},
		{"a threshold passed as a string", []string{"prometheusRule.alerts.HeadcountHTTPAPISlow.threshold=0.5"}, "/prometheusRule/alerts/HeadcountHTTPAPISlow/threshold"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var flags []string
			for _, s := range tc.set {
				flags = append(flags, "--set", s)
			}
			_, err := c.Render(ChartTarget{}, flags...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
