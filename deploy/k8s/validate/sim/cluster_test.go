package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/headcount/headcount/deploy/k8s/validate/internal/localkube"
)

const instanceLabel = "app.kubernetes.io/instance"

// The cluster all tests share: starting one costs tens of seconds. The
// tests run one after another (none is parallel): a drain or a taint on
// a node is seen by every namespace.
var (
	kube      *localkube.Cluster
	cs        kubernetes.Interface
	helmBin   string
	chartDir  string
	helmHome  string
	skipWhy   string
	baseNodes []string
)

// kwokStages are kwokctl's default Stages (sigs.k8s.io/kwok
// pkg/kwokctl/runtime/cluster.go): nodes become Ready and renew a Lease,
// pods become Running and Ready, and a deleted pod goes at once, as a
// kubelet that ran nothing would let it.
var kwokStages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-complete.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	env := map[string]string{}
	var missing []string
	for _, k := range []string{"K8S_SIM_ETCD", "K8S_SIM_APISERVER", "K8S_SIM_CONTROLLER_MANAGER", "K8S_SIM_SCHEDULER", "K8S_SIM_KWOK", "K8S_SIM_KWOK_SOURCE", "HELM"} {
		if env[k] = os.Getenv(k); env[k] == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		skipWhy = "no simulated cluster: " + strings.Join(missing, ", ") + " not set (make k8s-sim sets them)"
		return m.Run()
	}
	helmBin = env["HELM"]
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "helm", "headcount"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		return 1
	}
	chartDir = dir
	work, err := os.MkdirTemp("", "k8s-sim-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		return 1
	}
	if os.Getenv("K8S_SIM_KEEP_LOGS") == "1" {
		fmt.Println("sim: work directory (logs):", work)
	} else {
		defer os.RemoveAll(work)
	}
	helmHome = filepath.Join(work, "helm")
	bins := localkube.Binaries{
		Etcd: env["K8S_SIM_ETCD"], APIServer: env["K8S_SIM_APISERVER"],
		ControllerManager: env["K8S_SIM_CONTROLLER_MANAGER"], Scheduler: env["K8S_SIM_SCHEDULER"],
		Kwok: env["K8S_SIM_KWOK"],
	}
	for _, s := range kwokStages {
		bins.KwokStages = append(bins.KwokStages, filepath.Join(env["K8S_SIM_KWOK_SOURCE"], s))
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube, err = localkube.Start(ctx, work, os.Stdout, bins)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		return 1
	}
	defer kube.Stop()
	if cs, err = kubernetes.NewForConfig(kube.Config); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		return 1
	}
	// Three nodes in three zones, the smallest pool where a spread over
	// nodes and a drain mean something.
	for i, zone := range []string{"a", "b", "c"} {
		name := fmt.Sprintf("node-%d", i)
		if err := createNode(ctx, name, map[string]string{"topology.kubernetes.io/zone": "zone-" + zone}, nil); err != nil {
			fmt.Fprintf(os.Stderr, "sim: %v\n%s", err, kube.Tails())
			return 1
		}
		baseNodes = append(baseNodes, name)
	}
	if err := waitNodesSchedulable(ctx, baseNodes, nil); err != nil {
		fmt.Fprintf(os.Stderr, "sim: %v\n%s", err, kube.Tails())
		return 1
	}
	fmt.Printf("sim: cluster of %d kwok nodes ready in %s\n", len(baseNodes), time.Since(start).Round(time.Second))
	code := m.Run()
	if code != 0 {
		fmt.Fprint(os.Stderr, kube.Tails())
	}
	return code
}

// needCluster skips a test when there is no cluster, and bounds it.
func needCluster(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	if kube == nil {
		t.Skip(skipWhy)
	}
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	start := time.Now()
	t.Cleanup(func() { t.Logf("%s took %s", t.Name(), time.Since(start).Round(time.Second)) })
	return ctx
}

// createNode makes a Node for kwok to play: labelled as kubelets label
// theirs, with the given taints.
func createNode(ctx context.Context, name string, labels map[string]string, taints []corev1.Taint) error {
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
	for k, v := range labels {
		l[k] = v
	}
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       corev1.NodeSpec{Taints: taints},
	}, metav1.CreateOptions{})
	return err
}

// waitNodesSchedulable waits until each node is Ready and carries no
// taint but want's (the not-ready taint a new Node gets is lifted by the
// node lifecycle controller once kwok reports it Ready).
func waitNodesSchedulable(ctx context.Context, names []string, want []corev1.Taint) error {
	return poll(ctx, func() error {
		for _, n := range names {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, c := range node.Status.Conditions {
				ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}
			if !ready {
				return fmt.Errorf("node %s not Ready", n)
			}
			for _, tn := range node.Spec.Taints {
				if !hasTaint(want, tn) {
					return fmt.Errorf("node %s has taint %s", n, tn.ToString())
				}
			}
		}
		return nil
	})
}

func hasTaint(ts []corev1.Taint, t corev1.Taint) bool {
	for _, x := range ts {
		if x.Key == t.Key && x.Value == t.Value && x.Effect == t.Effect {
			return true
		}
	}
	return false
}

// poll runs f every 300ms until it returns nil, or returns its last error
// when ctx ends.
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// namespace makes a namespace enforcing the "restricted" Pod Security
// Standard, as the chart's README has it, and deletes it after the test.
func namespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// volume makes a PersistentVolume for one claim of the chart's single
// Redis: no provisioner runs here, and kwok mounts nothing.
func volume(ctx context.Context, t *testing.T) {
	t.Helper()
	_, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "sim-"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// helm runs the pinned helm against the cluster and returns its output.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmErr(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmBin, args...) //nolint:gosec // G204: the pinned helm make passes
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Only this cluster, and no user's helm configuration or repositories.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kube.Kubeconfig,
		"HELM_CONFIG_HOME="+filepath.Join(helmHome, "config"),
		"HELM_CACHE_HOME="+filepath.Join(helmHome, "cache"),
		"HELM_DATA_HOME="+filepath.Join(helmHome, "data"))
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String(), nil
}

// valuesFile writes values for helm's --values.
func valuesFile(t *testing.T, body string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(body); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func releaseSelector(release string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: instanceLabel + "=" + release}
}

// waitAvailable waits until every Deployment and StatefulSet of the
// release has rolled out to its replicas, all of them ready: at least the
// minimum of its autoscaler, the newest template only, none Pending.
func waitAvailable(ctx context.Context, t *testing.T, ns, release string) {
	t.Helper()
	start := time.Now()
	err := poll(ctx, func() error { return available(ctx, ns, release) })
	if err != nil {
		t.Fatalf("release %s in %s not available: %v\n%s", release, ns, err, podSummary(ctx, ns))
	}
	t.Logf("release %s available after %s", release, time.Since(start).Round(100*time.Millisecond))
}

func available(ctx context.Context, ns, release string) error {
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, releaseSelector(release))
	if err != nil {
		return err
	}
	sts, err := cs.AppsV1().StatefulSets(ns).List(ctx, releaseSelector(release))
	if err != nil {
		return err
	}
	if len(deps.Items) == 0 {
		return errors.New("no Deployment yet")
	}
	hpas, err := cs.AutoscalingV2().HorizontalPodAutoscalers(ns).List(ctx, releaseSelector(release))
	if err != nil {
		return err
	}
	least := map[string]int32{}
	for _, h := range hpas.Items {
		if h.Spec.MinReplicas != nil {
			least[h.Spec.ScaleTargetRef.Name] = *h.Spec.MinReplicas
		}
	}
	for _, d := range deps.Items {
		if err := deploymentDone(&d, least[d.Name]); err != nil {
			return err
		}
	}
	for _, s := range sts.Items {
		want := *s.Spec.Replicas
		st := s.Status
		if st.ObservedGeneration < s.Generation || st.ReadyReplicas != want || st.UpdatedReplicas != want || st.Replicas != want || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("StatefulSet %s: %d ready, %d updated, %d in all of %d (revision %s, want %s)", s.Name, st.ReadyReplicas, st.UpdatedReplicas, st.Replicas, want, st.CurrentRevision, st.UpdateRevision)
		}
	}
	return nil
}

func deploymentDone(d *appsv1.Deployment, least int32) error {
	want := *d.Spec.Replicas
	st := d.Status
	if want < least {
		return fmt.Errorf("Deployment %s: %d replicas, its autoscaler's minimum is %d", d.Name, want, least)
	}
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
		return fmt.Errorf("Deployment %s: %d available, %d updated, %d in all of %d", d.Name, st.AvailableReplicas, st.UpdatedReplicas, st.Replicas, want)
	}
	return nil
}

// podSummary says where each pod of the namespace is and why, for a
// failure's message.
func podSummary(ctx context.Context, ns string) string {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "pods: " + err.Error()
	}
	var lines []string
	for _, p := range pods.Items {
		why := ""
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				why += fmt.Sprintf(" %s: %s", c.Type, c.Message)
			}
		}
		lines = append(lines, fmt.Sprintf("  %s on %q: %s%s", p.Name, p.Spec.NodeName, p.Status.Phase, why))
	}
	sort.Strings(lines)
	return "pods:\n" + strings.Join(lines, "\n")
}

// podsOf lists the release's pods of one workload (app.kubernetes.io/name).
func podsOf(ctx context.Context, t *testing.T, ns, release, name string) []corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: instanceLabel + "=" + release + ",app.kubernetes.io/name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func ready(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// secretData reads one key of a Secret; "" and false when there is none.
func secretData(ctx context.Context, t *testing.T, ns, name, key string) (string, bool) {
	t.Helper()
	s, err := cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	v, ok := s.Data[key]
	return string(v), ok
}

// eachNamespaced calls f with every object of every listable kind in ns
// but Events, which belong to no release.
func eachNamespaced(ctx context.Context, ns string, f func(kind string, o unstructured.Unstructured)) error {
	lists, err := cs.Discovery().ServerPreferredNamespacedResources()
	if err != nil {
		return err
	}
	// Listing every kind lists the deprecated v1 Endpoints too; its
	// warning is no news.
	cfg := rest.CopyConfig(kube.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return err
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || r.Name == "events" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("list %s: %w", r.Name, err)
			}
			for _, o := range items.Items {
				f(r.Kind, o)
			}
		}
	}
	return nil
}
