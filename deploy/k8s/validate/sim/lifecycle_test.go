package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

const checksumAnnotation = "checksum/config"

// template is what a Deployment's pods are made from, as it matters here.
type template struct {
	generation int64
	checksum   string
}

func templates(ctx context.Context, t *testing.T, ns, release string) map[string]template {
	t.Helper()
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, releaseSelector(release))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]template{}
	for _, d := range deps.Items {
		out[d.Name] = template{d.Generation, d.Spec.Template.Annotations[checksumAnnotation]}
	}
	return out
}

// podUIDs are the release's headcount pods (not its Redis), by UID.
func podUIDs(ctx context.Context, t *testing.T, ns, release string) []string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: instanceLabel + "=" + release + ",app.kubernetes.io/part-of=headcount"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, string(p.UID))
	}
	slices.Sort(out)
	return out
}

const appsV2 = `apps:
  list:
    - id: my-app
      key: replace-this-key
      secret: replace-this-secret
      enabled: true
      enableSubscriptionCount: true
      webhooks: []
    - id: second-app
      key: second-key
      secret: second-secret
      enabled: true
      webhooks: []
`

// TestReleaseLifecycle installs, upgrades, rolls back and uninstalls one
// release, as docs/OPERATIONS.md's runbooks do with helm: changed apps
// reach the apps Secret in place and roll no pod (the binaries reload
// them live; "Add, change or remove an app"); a changed setting rolls
// every Deployment through its checksum ("Upgrade wsnodes"); a rollback
// restores both; an uninstall leaves only the Redis volume's claim, which
// Helm never owned (the chart's README says so).
func TestReleaseLifecycle(t *testing.T) {
	ctx := needCluster(t, 8*time.Minute)
	ns := namespace(ctx, t, "lifecycle")
	volume(ctx, t)
	const rel = "headcount"
	helm(t, "install", rel, chartDir, "-n", ns)
	waitAvailable(ctx, t, ns, rel)
	apps1, ok := secretData(ctx, t, ns, rel+"-apps", "apps.json")
	if !ok {
		t.Fatalf("no Secret %s-apps with apps.json", rel)
	}
	tmpl1 := templates(ctx, t, ns, rel)
	if len(tmpl1) != 3 {
		t.Fatalf("Deployments %v, want wsnode, cleaner, httpapi", tmpl1)
	}
	pods1 := podUIDs(ctx, t, ns, rel)

	// Changed apps: the Secret in place, the same pods.
	v2 := valuesFile(t, appsV2)
	helm(t, "upgrade", rel, chartDir, "-n", ns, "--values", v2)
	apps2, _ := secretData(ctx, t, ns, rel+"-apps", "apps.json")
	if apps2 == apps1 || !strings.Contains(apps2, "second-app") {
		t.Fatalf("after the apps upgrade the apps Secret holds %s", apps2)
	}
	if got := templates(ctx, t, ns, rel); !equalTemplates(got, tmpl1) {
		t.Errorf("the apps upgrade changed the pod templates: %v, was %v (the apps reload live)", got, tmpl1)
	}
	waitAvailable(ctx, t, ns, rel)
	if got := podUIDs(ctx, t, ns, rel); !slices.Equal(got, pods1) {
		t.Errorf("the apps upgrade replaced pods: %v, was %v", got, pods1)
	}

	// A changed setting: every Deployment rolls.
	helm(t, "upgrade", rel, chartDir, "-n", ns, "--values", v2, "--set", "config.HEADCOUNT_LOG_LEVEL=debug")
	tmpl3 := templates(ctx, t, ns, rel)
	for name, tp := range tmpl3 {
		if tp.checksum == tmpl1[name].checksum || tp.generation == tmpl1[name].generation {
			t.Errorf("Deployment %s: checksum %s, generation %d after a settings upgrade; was %s, %d", name, tp.checksum, tp.generation, tmpl1[name].checksum, tmpl1[name].generation)
		}
	}
	waitAvailable(ctx, t, ns, rel)
	if got := podUIDs(ctx, t, ns, rel); len(got) == 0 || slices.ContainsFunc(got, func(u string) bool { return slices.Contains(pods1, u) }) {
		t.Errorf("after the settings upgrade pods %v, some of the old %v remain", got, pods1)
	}

	// Rollback to the install: its apps and its settings.
	helm(t, "rollback", rel, "1", "-n", ns)
	if got, _ := secretData(ctx, t, ns, rel+"-apps", "apps.json"); got != apps1 {
		t.Errorf("after the rollback the apps Secret holds %s, want the install's %s", got, apps1)
	}
	for name, tp := range templates(ctx, t, ns, rel) {
		if tp.checksum != tmpl1[name].checksum {
			t.Errorf("Deployment %s: checksum %s after the rollback, want the install's %s", name, tp.checksum, tmpl1[name].checksum)
		}
	}
	waitAvailable(ctx, t, ns, rel)
	if h := helm(t, "history", rel, "-n", ns, "--max", "1"); !strings.Contains(h, "Rollback to 1") {
		t.Errorf("helm history's last revision:\n%s", h)
	}

	helm(t, "uninstall", rel, "-n", ns)
	claim := "PersistentVolumeClaim/data-" + rel + "-redis-0"
	err := poll(ctx, func() error {
		left, err := leftovers(ctx, ns, rel)
		if err != nil {
			return err
		}
		if !slices.Equal(left, []string{claim}) {
			return fmt.Errorf("left in the namespace: %v, want only %s", left, claim)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after helm uninstall: %v", err)
	}
}

func equalTemplates(a, b map[string]template) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// leftovers lists every object in ns that belongs to the release: by its
// labels (the chart's, or Helm's on its release records), Helm's
// annotations, or a name after the release's.
func leftovers(ctx context.Context, ns, release string) ([]string, error) {
	var out []string
	err := eachNamespaced(ctx, ns, func(kind string, o unstructured.Unstructured) {
		lb, an := o.GetLabels(), o.GetAnnotations()
		if lb[instanceLabel] == release || an["meta.helm.sh/release-name"] == release ||
			lb["owner"] == "helm" && lb["name"] == release || strings.HasPrefix(o.GetName(), release+"-") {
			out = append(out, kind+"/"+o.GetName())
		}
	})
	slices.Sort(out)
	return out, err
}

// TestRedisPasswordKeptAcrossUpgrades: the single Redis's generated
// password (lookup, which only a cluster answers) survives an upgrade; a
// password rotated by updating the Secret (docs/OPERATIONS.md, Rotate
// Redis credentials) survives the next upgrade too, and Redis restarts
// onto it; with redis.password.existingSecret nothing is generated.
func TestRedisPasswordKeptAcrossUpgrades(t *testing.T) {
	ctx := needCluster(t, 6*time.Minute)
	ns := namespace(ctx, t, "password")
	volume(ctx, t)
	volume(ctx, t)
	const rel = "pw"
	secret := rel + "-headcount-redis-auth"
	helm(t, "install", rel, chartDir, "-n", ns)
	p1, ok := secretData(ctx, t, ns, secret, "password")
	if !ok || len(p1) != 40 {
		t.Fatalf("Secret %s holds %q, want a generated 40-character password", secret, p1)
	}
	waitAvailable(ctx, t, ns, rel)
	helm(t, "upgrade", rel, chartDir, "-n", ns, "--set", "config.HEADCOUNT_LOG_LEVEL=debug")
	if p2, _ := secretData(ctx, t, ns, secret, "password"); p2 != p1 {
		t.Fatalf("helm upgrade changed the Redis password: %q, was %q", p2, p1)
	}

	// The runbook's rotation: a new password into the Secret, then an
	// upgrade must not put the old one back.
	rotated := strings.Repeat("r", 40)
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte(rotated)
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	helm(t, "upgrade", rel, chartDir, "-n", ns, "--set", "config.HEADCOUNT_LOG_LEVEL=info")
	if p3, _ := secretData(ctx, t, ns, secret, "password"); p3 != rotated {
		t.Fatalf("helm upgrade after a rotation left %q in the Secret, want the rotated password", p3)
	}
	// "restart the Redis StatefulSet", as kubectl rollout restart does.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	if _, err := cs.AppsV1().StatefulSets(ns).Patch(ctx, rel+"-headcount-redis", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAvailable(ctx, t, ns, rel)

	// Your own Secret: none generated, and Redis reads yours.
	const own, ownRel = "own-redis", "own"
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: own},
		Data:       map[string][]byte{"password": []byte(strings.Repeat("o", 40))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	helm(t, "install", ownRel, chartDir, "-n", ns, "--set", "redis.password.existingSecret="+own)
	if _, ok := secretData(ctx, t, ns, ownRel+"-headcount-redis-auth", "password"); ok {
		t.Errorf("with redis.password.existingSecret the chart still generated %s-headcount-redis-auth", ownRel)
	}
	sts, err := cs.AppsV1().StatefulSets(ns).Get(ctx, ownRel+"-headcount-redis", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Name != own {
			t.Errorf("Redis's %s comes from Secret %s, want %s", e.Name, ref.SecretKeyRef.Name, own)
		}
	}
	waitAvailable(ctx, t, ns, ownRel)
}
