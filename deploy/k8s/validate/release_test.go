package validate

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// The chart in other people's clusters: two releases in one namespace, a
// subchart, NetworkPolicies that leave the namespace's other pods alone,
// a spread that never holds a drain, a password on its Redis, an image
// that exists.

const instanceLabel = "app.kubernetes.io/instance"

// renderRelease renders the chart as the release name with extra flags
// (no given objects), returning the decoded set and the documents.
func renderRelease(t *testing.T, release string, extra ...string) (*Set, [][]byte) {
	t.Helper()
	c := testChart(t)
	c.Release = release
	docs, err := c.Render(ChartTarget{Name: "helm " + release}, extra...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSet("release "+release, docs)
	if err != nil {
		t.Fatal(err)
	}
	return s, docs
}

// everythingOn turns on every optional object.
var everythingOn = []string{
	"--set", "ingress.enabled=true,serviceMonitor.enabled=true,grafanaDashboard.enabled=true,httpRoute.enabled=true,prometheusRule.enabled=true",
	"--set-json", `httpRoute.parentRefs=[{"name":"gateway","namespace":"gateway-system"}]`,
}

// podSelector is one label selector over pods, and where it is.
type podSelector struct {
	where string
	sel   *metav1.LabelSelector
}

// podSelectors lists every selector of pods in a render: workloads',
// their spread's, Services', PDBs', NetworkPolicies' and their pod peers'.
func podSelectors(s *Set) []podSelector {
	var out []podSelector
	for _, w := range s.Workloads() {
		if !w.RunsOnce() {
			out = append(out, podSelector{w.ID() + " selector", w.Selector})
		}
		for _, tsc := range w.Template.Spec.TopologySpreadConstraints {
			out = append(out, podSelector{w.ID() + " spread over " + tsc.TopologyKey, tsc.LabelSelector})
		}
	}
	for _, svc := range s.Services {
		out = append(out, podSelector{"Service/" + svc.Name, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}})
	}
	for _, p := range s.PDBs {
		out = append(out, podSelector{"PodDisruptionBudget/" + p.Name, p.Spec.Selector})
	}
	for _, np := range s.NetworkPolicies {
		out = append(out, podSelector{"NetworkPolicy/" + np.Name, &np.Spec.PodSelector})
		for _, r := range np.Spec.Ingress {
			for _, p := range r.From {
				if p.PodSelector != nil && p.NamespaceSelector == nil {
					out = append(out, podSelector{"NetworkPolicy/" + np.Name + " ingress peer", p.PodSelector})
				}
			}
		}
		for _, r := range np.Spec.Egress {
			for _, p := range r.To {
				if p.PodSelector != nil && p.NamespaceSelector == nil {
					out = append(out, podSelector{"NetworkPolicy/" + np.Name + " egress peer", p.PodSelector})
				}
			}
		}
	}
	return out
}

// stringsOf lists every string value in a document.
func stringsOf(t *testing.T, doc []byte) []string {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(v)
	return out
}

// TestChartReleasesShareANamespace: two releases of the chart, every
// optional object on, in one namespace: no object name is shared, no
// object of one names an object of the other, every pod selector carries
// the release and selects none of the other release's pods, and each
// release's ServiceMonitor selects its own metrics Service alone.
func TestChartReleasesShareANamespace(t *testing.T) {
	a, aDocs := renderRelease(t, "alpha", everythingOn...)
	b, _ := renderRelease(t, "beta", everythingOn...)
	bNames := map[string]string{}
	for _, o := range b.Objects {
		bNames[o.Name] = o.ID()
	}
	for _, o := range a.Objects {
		if other, ok := bNames[o.Name]; ok {
			t.Errorf("%s of alpha and %s of beta share the name %s", o.ID(), other, o.Name)
		}
	}
	for i, d := range aDocs {
		for _, v := range stringsOf(t, d) {
			if other, ok := bNames[v]; ok {
				t.Errorf("alpha's %s names %s, which is beta's", a.Objects[i].ID(), other)
			}
			if strings.Contains(v, "beta") {
				t.Errorf("alpha's %s holds %q, which is beta's", a.Objects[i].ID(), v)
			}
		}
	}
	for _, r := range []struct {
		name        string
		self, other *Set
	}{{"alpha", a, b}, {"beta", b, a}} {
		for _, ps := range podSelectors(r.self) {
			if ps.sel == nil || ps.sel.MatchLabels[instanceLabel] != r.name {
				t.Errorf("%s: %s does not require %s=%s: %v", r.name, ps.where, instanceLabel, r.name, ps.sel)
				continue
			}
			if ws, err := r.other.Selected(ps.sel); err != nil || len(ws) > 0 {
				t.Errorf("%s: %s selects the other release's %v (%v)", r.name, ps.where, ws, err)
			}
		}
		for _, w := range r.self.Workloads() {
			if w.Template.Labels[instanceLabel] != r.name {
				t.Errorf("%s: %s pod labels %v lack %s=%s", r.name, w.ID(), w.Template.Labels, instanceLabel, r.name)
			}
		}
		if len(r.self.ServiceMonitors) != 1 {
			t.Fatalf("%s: want one ServiceMonitor, have %d", r.name, len(r.self.ServiceMonitors))
		}
		ls, err := metav1.LabelSelectorAsSelector(&r.self.ServiceMonitors[0].Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		for _, svc := range r.other.Services {
			if ls.Matches(labels.Set(svc.Labels)) {
				t.Errorf("%s: ServiceMonitor selects the other release's Service/%s", r.name, svc.Name)
			}
		}
	}
}

// TestChartAsSubchart: the chart as the dependency of a throwaway umbrella
// chart that sets global values (as umbrella and Argo CD wrapper charts
// do) renders, release-scoped; nameOverride and fullnameOverride name its
// objects.
func TestChartAsSubchart(t *testing.T) {
	c := testChart(t)
	dir := filepath.Join(t.TempDir(), "umbrella")
	if err := os.MkdirAll(filepath.Join(dir, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	sub := copyChart(t, c.Dir)
	if err := os.Rename(sub, filepath.Join(dir, "charts", "headcount")); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"Chart.yaml": `apiVersion: v2
name: umbrella
version: 0.1.0
dependencies:
  - name: headcount
    version: 0.1.0
    repository: file://charts/headcount
`,
		"values.yaml": `global:
  imageRegistry: registry.example.com
  storageClass: fast
headcount: {}
`,
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u := *c
	u.Dir, u.Release = dir, "shop"
	for _, tc := range []struct {
		name, wsnode string
		extra        []string
	}{
		{"defaults", "shop-headcount-wsnode", nil},
		{"nameOverride", "shop-realtime-wsnode", []string{"--set", "headcount.nameOverride=realtime"}},
		{"fullnameOverride", "rt-wsnode", []string{"--set", "headcount.fullnameOverride=rt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := u.Render(ChartTarget{Name: "umbrella"}, tc.extra...)
			if err != nil {
				t.Fatal(err)
			}
			s, err := DecodeSet("umbrella", docs)
			if err != nil {
				t.Fatal(err)
			}
			d := s.Deployment(tc.wsnode)
			if d == nil {
				t.Fatalf("no Deployment %s in the umbrella's render", tc.wsnode)
			}
			if got := d.Spec.Selector.MatchLabels[instanceLabel]; got != "shop" {
				t.Errorf("Deployment/%s selects %s=%q, want the umbrella's release", tc.wsnode, instanceLabel, got)
			}
		})
	}
}

// TestChartNetworkPoliciesSelectTheRelease: in the defaults and every
// example, each NetworkPolicy selects the release's pods alone, never
// {}, and none selects a neighbour in the namespace (another application,
// or another release of the chart); networkPolicy.enabled=false renders
// none; networkPolicy.extraIngressFrom admits more peers to the admin
// ports.
func TestChartNetworkPoliciesSelectTheRelease(t *testing.T) {
	neighbours := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  namespace: headcount
spec:
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      containers: [{name: shop, image: shop}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: other-headcount-wsnode
  namespace: headcount
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: wsnode, app.kubernetes.io/instance: other}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: wsnode
        app.kubernetes.io/part-of: headcount
        app.kubernetes.io/instance: other
    spec:
      containers: [{name: wsnode, image: headcount}]
`
	nDocs, err := SplitYAML([]byte(neighbours))
	if err != nil {
		t.Fatal(err)
	}
	targets, err := testChart(t).Targets()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			s, err := DecodeSet(tg.Name, append(append([][]byte{}, chartDocs(t, tg.Name)...), nDocs...))
			if err != nil {
				t.Fatal(err)
			}
			if len(s.NetworkPolicies) == 0 {
				t.Fatal("no NetworkPolicy in the render")
			}
			for _, np := range s.NetworkPolicies {
				if emptySelector(np) || np.Spec.PodSelector.MatchLabels[instanceLabel] != "headcount" {
					t.Errorf("NetworkPolicy/%s: podSelector %v does not require %s=headcount", np.Name, np.Spec.PodSelector, instanceLabel)
				}
				ws, err := s.Selected(&np.Spec.PodSelector)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range ws {
					if w.Name == "shop" || w.Name == "other-headcount-wsnode" {
						t.Errorf("NetworkPolicy/%s selects the neighbour %s", np.Name, w.ID())
					}
				}
			}
		})
	}
	t.Run("disabled", func(t *testing.T) {
		s, _ := renderRelease(t, "headcount", "--set", "networkPolicy.enabled=false")
		for _, np := range s.NetworkPolicies {
			t.Errorf("networkPolicy.enabled=false still renders NetworkPolicy/%s", np.Name)
		}
	})
	t.Run("extra peers", func(t *testing.T) {
		s, _ := renderRelease(t, "headcount", "--set-json", `networkPolicy.extraIngressFrom=[{"podSelector":{"matchLabels":{"debug":"true"}}}]`)
		np := netpol(t, s, "headcount-metrics-ingress")
		if !slices.ContainsFunc(np.Spec.Ingress[0].From, func(p networkingv1.NetworkPolicyPeer) bool {
			return p.PodSelector != nil && p.PodSelector.MatchLabels["debug"] == "true"
		}) {
			t.Errorf("the metrics policy does not admit the extra peer: %v", np.Spec.Ingress)
		}
	})
}

// TestChartSpreadNeverHoldsADrain: by default every spread over nodes is
// soft, or hard only among the nodes the pod may run on (taints and node
// affinity honoured), so cordoned or tainted nodes are no empty domains;
// topologySpreadConstraints replaces the chart's.
func TestChartSpreadNeverHoldsADrain(t *testing.T) {
	s := renderChart(t, "")
	for _, w := range s.Workloads() {
		if !isHeadcount(w) || w.RunsOnce() {
			continue
		}
		if len(w.Template.Spec.TopologySpreadConstraints) == 0 {
			t.Errorf("%s: no spread", w.ID())
		}
		for _, tsc := range w.Template.Spec.TopologySpreadConstraints {
			if err := spreadSchedules(tsc); err != nil {
				t.Errorf("%s: %v", w.ID(), err)
			}
		}
	}
	s = renderChart(t, "", "--set-json", `wsnode.topologySpreadConstraints=[{"maxSkew":2,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"wsnode"}}}]`)
	got := deploy(t, s, "wsnode").Spec.Template.Spec.TopologySpreadConstraints
	if len(got) != 1 || got[0].MaxSkew != 2 {
		t.Errorf("wsnode.topologySpreadConstraints did not replace the chart's: %v", got)
	}
}

// TestChartRedisPassword: the single Redis requires a password, generated
// into a Secret (kept across upgrades: lookup); Redis and the binaries
// read it from there, so no pod spec holds it; with existingSecret, they
// read that one and the chart makes none.
func TestChartRedisPassword(t *testing.T) {
	s, docs := renderRelease(t, "headcount")
	sec := s.Secret("headcount-redis-auth")
	if sec == nil {
		t.Fatal("no Secret headcount-redis-auth holding the Redis password")
	}
	pw := string(sec.Data["password"])
	if len(pw) < 32 {
		t.Fatalf("the generated password is %d characters long, want at least 32", len(pw))
	}
	for i, d := range docs {
		if s.Objects[i].Kind == "Secret" {
			continue
		}
		if strings.Contains(string(d), pw) || strings.Contains(string(d), base64.StdEncoding.EncodeToString([]byte(pw))) {
			t.Errorf("%s holds the Redis password in clear", s.Objects[i].ID())
		}
	}
	redis := s.StatefulSets[0].Spec.Template.Spec.Containers[0]
	if !slices.Equal(redisAuthArgs(redis.Args), []string{"--requirepass", "$(REDIS_PASSWORD)"}) || slices.Contains(redis.Args, "--protected-mode") {
		t.Errorf("Redis's args %v: want --requirepass $(REDIS_PASSWORD) and no --protected-mode", redis.Args)
	}
	want := map[string]string{"REDIS_PASSWORD": "", "REDISCLI_AUTH": ""}
	checkEnvFrom(t, "StatefulSet/"+s.StatefulSets[0].Name, redis.Env, want, "headcount-redis-auth")
	for _, d := range s.Deployments {
		checkPasswordFile(t, "Deployment/"+d.Name, &d.Spec.Template.Spec, "headcount-redis-auth", "password")
	}

	s, _ = renderRelease(t, "headcount", "--set", "redis.password.existingSecret=mine,redis.password.key=pw")
	if sec := s.Secret("headcount-redis-auth"); sec != nil {
		t.Error("with redis.password.existingSecret the chart still makes its own Secret")
	}
	checkEnvFrom(t, "StatefulSet/redis", s.StatefulSets[0].Spec.Template.Spec.Containers[0].Env, map[string]string{"REDIS_PASSWORD": "", "REDISCLI_AUTH": ""}, "mine")
	for _, d := range s.Deployments {
		checkPasswordFile(t, "Deployment/"+d.Name, &d.Spec.Template.Spec, "mine", "pw")
	}
}

// checkPasswordFile requires a binary's pod to read the Redis password
// from key of secret mounted as a directory (never subPath, which the
// kubelet does not update), named by HEADCOUNT_REDIS_PASSWORD_FILE, so a
// rotated password needs no restart; and not from the environment.
func checkPasswordFile(t *testing.T, id string, pod *corev1.PodSpec, secret, key string) {
	t.Helper()
	c := pod.Containers[0]
	var file string
	for _, e := range c.Env {
		switch e.Name {
		case "HEADCOUNT_REDIS_PASSWORD":
			t.Errorf("%s: the password comes from the environment, which cannot rotate", id)
		case "HEADCOUNT_REDIS_PASSWORD_FILE":
			file = e.Value
		}
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.SubPath == "" && strings.HasPrefix(file, m.MountPath+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("%s: HEADCOUNT_REDIS_PASSWORD_FILE %q is in no directory mount", id, file)
	}
	for _, v := range pod.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.Secret == nil || v.Secret.SecretName != secret || len(v.Secret.Items) != 1 ||
			v.Secret.Items[0].Key != key || mount.MountPath+"/"+v.Secret.Items[0].Path != file {
			t.Errorf("%s: volume %s is %+v, want key %s of Secret %s at %s", id, v.Name, v.VolumeSource, key, secret, file)
		}
		return
	}
	t.Errorf("%s: no volume %s", id, mount.Name)
}

func redisAuthArgs(args []string) []string {
	if i := slices.Index(args, "--requirepass"); i >= 0 && i+1 < len(args) {
		return args[i : i+2]
	}
	return nil
}

// checkEnvFrom requires each variable of want to come from secret.
func checkEnvFrom(t *testing.T, id string, env []corev1.EnvVar, want map[string]string, secret string) {
	t.Helper()
	for name := range want {
		i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || env[i].ValueFrom == nil || env[i].ValueFrom.SecretKeyRef == nil || env[i].ValueFrom.SecretKeyRef.Name != secret {
			t.Errorf("%s: %s does not come from the Secret %s", id, name, secret)
		}
	}
}

// TestChartDefaultImage: the defaults pull the image the release workflow
// publishes, tagged with the chart's appVersion; the tag, the registry
// and a digest override it.
func TestChartDefaultImage(t *testing.T) {
	cases := []struct {
		name, want string
		extra      []string
	}{
		{"defaults", "ghcr.io/headcount/headcount:0.1.0", nil},
		{"tag", "ghcr.io/headcount/headcount:0.2.0", []string{"--set", "image.tag=0.2.0"}},
		{"no registry", "registry.example.com/headcount:1.0.0", []string{"--set", "image.registry=,image.repository=registry.example.com/headcount,image.tag=1.0.0"}},
		{"digest", "ghcr.io/headcount/headcount@sha256:" + strings.Repeat("a", 64), []string{"--set", "image.digest=sha256:" + strings.Repeat("a", 64)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := renderChart(t, "", tc.extra...)
			for _, r := range s.containers(true) {
				if r.binary != "" && r.c.Image != tc.want {
					t.Errorf("%s: image %s, want %s", r.id(), r.c.Image, tc.want)
				}
			}
		})
	}
}

// TestChartValues: the values a chart user expects (testdata/chart-values.yaml
// sets them all) pass the schema, decode strictly and land where they
// should.
func TestChartValues(t *testing.T) {
	s := renderChart(t, "../../k8s/validate/testdata/chart-values.yaml")
	const full = "headcount-realtime-" // nameOverride realtime
	var sa *corev1.ServiceAccount
	for _, o := range s.Objects {
		if a, ok := o.Typed.(*corev1.ServiceAccount); ok && a.Name == "realtime-sa" {
			sa = a
		}
	}
	if sa == nil || sa.Annotations["iam.gke.io/gcp-service-account"] == "" {
		t.Errorf("serviceAccount.name and .annotations: ServiceAccount %v", sa)
	}
	for _, b := range []string{"wsnode", "cleaner", "httpapi"} {
		d := s.Deployment(full + b)
		if d == nil {
			t.Fatalf("no Deployment %s%s", full, b)
		}
		spec, l := d.Spec.Template.Spec, d.Spec.Template.Labels
		tier := map[string]string{"wsnode": "edge"}[b]
		if tier == "" {
			tier = "realtime"
		}
		c := spec.Containers[0]
		for what, ok := range map[string]bool{
			"serviceAccount.name":              spec.ServiceAccountName == "realtime-sa",
			"commonLabels":                     l["team"] == "platform" && d.Labels["team"] == "platform",
			"podLabels":                        l["tier"] == tier && l[instanceLabel] == "headcount",
			"podAnnotations":                   d.Spec.Template.Annotations["example.com/owner"] == "platform",
			"podSecurityContext (OpenShift)":   spec.SecurityContext != nil && spec.SecurityContext.RunAsUser == nil && spec.SecurityContext.FSGroup == nil && *spec.SecurityContext.RunAsNonRoot,
			"nodeSelector":                     spec.NodeSelector["pool"] == "realtime",
			"tolerations":                      len(spec.Tolerations) == 1 && spec.Tolerations[0].Key == "dedicated",
			"priorityClassName":                spec.PriorityClassName == "realtime-high",
			"affinity":                         (spec.Affinity != nil) == (b == "wsnode"),
			"extraEnv":                         slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "TZ" }),
			"extraEnvFrom":                     slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool { return e.SecretRef != nil && e.SecretRef.Name == "realtime-extra" }),
			"extraVolumes":                     slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "ca" && v.ConfigMap != nil }),
			"extraVolumeMounts":                slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ca" }),
			"initContainers":                   (len(spec.InitContainers) == 1) == (b == "wsnode"),
			"sidecars":                         (len(spec.Containers) == 2) == (b == "wsnode"),
			"image.registry":                   c.Image == "registry.example.com/mirror/headcount:0.1.0",
			"probes keep their paths and port": c.ReadinessProbe.HTTPGet.Path == "/readyz" && c.LivenessProbe.HTTPGet.Port.String() == "metrics",
		} {
			if !ok {
				t.Errorf("%s: %s is not applied", d.Name, what)
			}
		}
	}
	ws := deploy(t, s, "realtime-wsnode").Spec.Template.Spec.Containers[0]
	if ws.ReadinessProbe.PeriodSeconds != 5 || ws.LivenessProbe.TimeoutSeconds != 10 || ws.LivenessProbe.PeriodSeconds != 10 {
		t.Errorf("wsnode.probes: readiness %+v, liveness %+v", ws.ReadinessProbe, ws.LivenessProbe)
	}
	svc := s.Service(full + "wsnode")
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.Ports[0].NodePort != 30601 ||
		svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || !slices.Equal(svc.Spec.LoadBalancerSourceRanges, []string{"10.0.0.0/8"}) {
		t.Errorf("wsnode.service: %+v", svc)
	}
	if svc := s.Service(full + "httpapi"); svc == nil || svc.Spec.Ports[0].NodePort != 30808 {
		t.Errorf("httpapi.service.nodePort: %+v", svc)
	}
	var pods bool
	for _, h := range s.HPAs {
		for _, m := range h.Spec.Metrics {
			if m.Pods != nil && m.Pods.Metric.Name == "headcount_wsnode_connections_open" && m.Pods.Target.AverageValue.Value() == 20000 && h.Spec.ScaleTargetRef.Name == full+"wsnode" {
				pods = true
			}
		}
	}
	if !pods {
		t.Error("wsnode.autoscaling.targetConnectionsPerPod: no Pods metric on headcount_wsnode_connections_open")
	}
	for _, p := range s.PDBs {
		if p.Name == full+"cleaner" {
			t.Error("cleaner.pdb.enabled=false still renders its PodDisruptionBudget")
		}
	}
	if len(s.PDBs) != 2 {
		t.Errorf("want the PDBs of wsnode and httpapi, have %d", len(s.PDBs))
	}
	if len(s.ServiceMonitors) != 1 || s.ServiceMonitors[0].Spec.Endpoints[0].ScrapeTimeout != "10s" ||
		// The chart's own (instance: the pod's name), then the value's.
		len(s.ServiceMonitors[0].Spec.Endpoints[0].Relabelings) != 2 || len(s.ServiceMonitors[0].Spec.Endpoints[0].MetricRelabelings) != 1 {
		t.Errorf("serviceMonitor.scrapeTimeout, .relabelings, .metricRelabelings: %+v", s.ServiceMonitors)
	}
	if len(s.HTTPRoutes) != 1 {
		t.Fatalf("httpRoute.enabled: %d HTTPRoutes", len(s.HTTPRoutes))
	}
	var backends []string
	for _, r := range s.HTTPRoutes[0].Spec.Rules {
		for _, b := range r.BackendRefs {
			if s.Service(b.Name) == nil || s.Service(b.Name).Spec.Ports[0].Port != b.Port {
				t.Errorf("HTTPRoute backend %s:%d is no Service port of the render", b.Name, b.Port)
			}
			backends = append(backends, r.Matches[0].Path.Value+" "+b.Name)
		}
	}
	if !slices.Equal(backends, []string{"/app " + full + "wsnode", "/apps " + full + "httpapi"}) {
		t.Errorf("HTTPRoute routes %v", backends)
	}
}
