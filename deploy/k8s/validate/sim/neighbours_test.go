package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
)

// manifest lists Kind/name of every object of a release, as Helm has it.
func manifest(t *testing.T, ns, release string) []string {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(helm(t, "get", "manifest", release, "-n", ns)), 4096)
	var out []string
	for {
		var o unstructured.Unstructured
		err := dec.Decode(&o.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if o.Object != nil {
			out = append(out, o.GetKind()+"/"+o.GetName())
		}
	}
}

// otherApp is a Deployment of someone else's in the namespace, fit for the
// "restricted" Pod Security Standard.
func otherApp(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	l := map[string]string{"app": "shop"}
	_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{Name: "shop", Image: "registry.example.com/shop:1",
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = poll(ctx, func() error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "shop", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return deploymentDone(d, 0)
	})
	if err != nil {
		t.Fatalf("Deployment shop: %v\n%s", err, podSummary(ctx, ns))
	}
}

// TestReleasesShareANamespace: two releases and another application in
// one namespace, all available; no object is in both releases or owned
// (through its owners) by both; each release's NetworkPolicies, their
// podSelectors and their in-namespace peers, evaluated against the pods
// the API server holds, select pods of that release only, and every pod of
// the release is selected by one; the other application's pods by none.
func TestReleasesShareANamespace(t *testing.T) {
	ctx := needCluster(t, 6*time.Minute)
	ns := namespace(ctx, t, "shared")
	releases := []string{"alpha", "beta"}
	for _, rel := range releases {
		volume(ctx, t)
		helm(t, "install", rel, chartDir, "-n", ns)
	}
	otherApp(ctx, t, ns)
	for _, rel := range releases {
		waitAvailable(ctx, t, ns, rel)
	}

	// Names: each release's objects are its own, as the API server has them.
	owner := map[string]string{}
	for _, rel := range releases {
		for _, id := range manifest(t, ns, rel) {
			if prev, ok := owner[id]; ok {
				t.Errorf("%s is in releases %s and %s", id, prev, rel)
			}
			owner[id] = rel
		}
	}
	if len(owner) < 20 {
		t.Fatalf("the two releases hold %d objects: %v", len(owner), owner)
	}

	// Owners: follow every object's ownerReferences up to the release.
	objs, err := namespacedObjects(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	byUID := map[types.UID]*unstructured.Unstructured{}
	for i := range objs {
		byUID[objs[i].GetUID()] = &objs[i]
	}
	var releasesOf func(o *unstructured.Unstructured, depth int) map[string]bool
	releasesOf = func(o *unstructured.Unstructured, depth int) map[string]bool {
		out := map[string]bool{}
		if r := o.GetAnnotations()["meta.helm.sh/release-name"]; r != "" {
			out[r] = true
		}
		if depth > 5 {
			return out
		}
		for _, ref := range o.GetOwnerReferences() {
			if p := byUID[ref.UID]; p != nil {
				for r := range releasesOf(p, depth+1) {
					out[r] = true
				}
			}
		}
		return out
	}
	owned := 0
	for i := range objs {
		rs := releasesOf(&objs[i], 0)
		if len(rs) > 1 {
			t.Errorf("%s/%s belongs to releases %v", objs[i].GetKind(), objs[i].GetName(), rs)
		}
		if len(rs) == 1 && len(objs[i].GetOwnerReferences()) > 0 {
			owned++
		}
	}
	if owned == 0 {
		t.Fatal("no object is owned through a release: the owner check saw nothing")
	}

	// NetworkPolicies against the pods.
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shop := 0
	for _, p := range pods.Items {
		if p.Labels["app"] == "shop" {
			shop++
		}
	}
	if shop != 2 {
		t.Fatalf("%d pods of the other application, want 2", shop)
	}
	covered := map[string]bool{}
	for _, rel := range releases {
		nps, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, releaseSelector(rel))
		if err != nil {
			t.Fatal(err)
		}
		if len(nps.Items) == 0 {
			t.Fatalf("release %s has no NetworkPolicy", rel)
		}
		for _, np := range nps.Items {
			sel := selectors(t, &np)
			for what, s := range sel {
				n := 0
				for _, p := range pods.Items {
					if !s.Matches(labels.Set(p.Labels)) {
						continue
					}
					n++
					if p.Labels[instanceLabel] != rel {
						t.Errorf("NetworkPolicy %s (%s %s) selects pod %s of %q", np.Name, what, s, p.Name, p.Labels[instanceLabel])
					}
					if what == "podSelector" {
						covered[p.Name] = true
					}
				}
				if n == 0 {
					t.Errorf("NetworkPolicy %s: %s %s selects no pod", np.Name, what, s)
				}
			}
		}
	}
	for _, p := range pods.Items {
		if rel := p.Labels[instanceLabel]; rel != "" && !covered[p.Name] {
			t.Errorf("pod %s of release %s is selected by none of its release's NetworkPolicies", p.Name, rel)
		}
	}
}

// selectors are a policy's podSelector and its peers' podSelectors that
// pick pods of the policy's own namespace (no namespaceSelector).
func selectors(t *testing.T, np *networkingv1.NetworkPolicy) map[string]labels.Selector {
	t.Helper()
	out := map[string]labels.Selector{}
	add := func(what string, ls *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		out[what] = s
	}
	add("podSelector", &np.Spec.PodSelector)
	for i, r := range np.Spec.Ingress {
		for j, p := range r.From {
			if p.PodSelector != nil && p.NamespaceSelector == nil {
				add(fmt.Sprintf("ingress[%d].from[%d]", i, j), p.PodSelector)
			}
		}
	}
	for i, r := range np.Spec.Egress {
		for j, p := range r.To {
			if p.PodSelector != nil && p.NamespaceSelector == nil {
				add(fmt.Sprintf("egress[%d].to[%d]", i, j), p.PodSelector)
			}
		}
	}
	return out
}

// namespacedObjects lists every object of every listable kind in ns.
func namespacedObjects(ctx context.Context, ns string) ([]unstructured.Unstructured, error) {
	var out []unstructured.Unstructured
	err := eachNamespaced(ctx, ns, func(kind string, o unstructured.Unstructured) {
		o.SetKind(kind)
		out = append(out, o)
	})
	return out, err
}

// TestChartAsSubchart: an umbrella chart depending on the chart by a
// file:// path (helm dependency build, offline), with global values and
// the subchart's under its name, installs and becomes available.
func TestChartAsSubchart(t *testing.T) {
	ctx := needCluster(t, 5*time.Minute)
	ns := namespace(ctx, t, "umbrella")
	volume(ctx, t)
	dir := filepath.Join(t.TempDir(), "umbrella")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"Chart.yaml": fmt.Sprintf(`apiVersion: v2
name: umbrella
version: 0.1.0
dependencies:
  - name: headcount
    version: 0.1.0
    repository: file://%s
`, chartDir),
		"values.yaml": `global:
  imageRegistry: registry.example.com
  storageClass: fast
headcount:
  config:
    HEADCOUNT_LOG_LEVEL: debug
`,
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	helm(t, "dependency", "build", dir)
	const rel = "shop"
	helm(t, "install", rel, dir, "-n", ns)
	waitAvailable(ctx, t, ns, rel)
	if _, err := cs.AppsV1().Deployments(ns).Get(ctx, "shop-headcount-wsnode", metav1.GetOptions{}); err != nil {
		t.Errorf("the subchart's wsnode: %v", err)
	}
}
