package sim

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/kubectl/pkg/drain"
)

// wsnodesByNode counts the release's ready wsnodes per node; pending are
// those the scheduler could not place.
func wsnodesByNode(ctx context.Context, t *testing.T, ns, release string) (byNode map[string]int, readyN, pending int) {
	t.Helper()
	byNode = map[string]int{}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, wsnodeSelector(release))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
		case p.Spec.NodeName == "":
			pending++
		case ready(&p):
			byNode[p.Spec.NodeName]++
			readyN++
		}
	}
	return byNode, readyN, pending
}

// TestDrainWithBudgets drains the node holding two of four wsnodes the way
// kubectl drain does (k8s.io/kubectl/pkg/drain: cordon, then the Eviction
// API, retrying what a PodDisruptionBudget refuses). The drain completes:
// each evicted wsnode's replacement is placed on another node by the
// scheduler under the chart's spread and made Ready by kwok, so the
// budget lets the next one go; no wsnode is left Pending, and, watching
// every change, never were fewer than three of four ready.
func TestDrainWithBudgets(t *testing.T) {
	ctx := needCluster(t, 6*time.Minute)
	ns := namespace(ctx, t, "drain")
	volume(ctx, t)
	const rel = "dr"
	helm(t, "install", rel, chartDir, "-n", ns, "--set", "wsnode.autoscaling.enabled=false,wsnode.replicas=4")
	waitAvailable(ctx, t, ns, rel)
	byNode, _, _ := wsnodesByNode(ctx, t, ns, rel)
	target := ""
	for n, c := range byNode {
		if c == 2 {
			target = n
		}
	}
	if target == "" {
		t.Fatalf("wsnodes per node %v: the spread should put two on one of three nodes", byNode)
	}

	// Every change to the wsnodes, in order, from before the drain: the
	// budget must keep three of four ready throughout.
	list, err := cs.CoreV1().Pods(ns).List(ctx, wsnodeSelector(rel))
	if err != nil {
		t.Fatal(err)
	}
	opts := wsnodeSelector(rel)
	opts.ResourceVersion = list.ResourceVersion
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	fewest := make(chan int, 1)
	go func() {
		readyPods := map[string]bool{}
		for _, p := range list.Items {
			readyPods[p.Name] = ready(&p)
		}
		least := 4
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				readyPods[p.Name] = ev.Type != watch.Deleted && ready(p)
				n := 0
				for _, r := range readyPods {
					if r {
						n++
					}
				}
				least = min(least, n)
			}
		}
		fewest <- least
	}()

	var out, errOut bytes.Buffer
	h := &drain.Helper{
		Ctx: ctx, Client: cs,
		GracePeriodSeconds: -1, IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		// kubectl waits 5s after a refused eviction; kwok is quicker.
		EvictErrorRetryDelay: time.Second,
		Timeout:              3 * time.Minute, Out: &out, ErrOut: &errOut,
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := drain.RunCordonOrUncordon(h, node, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n, err := cs.CoreV1().Nodes().Get(context.Background(), target, metav1.GetOptions{}); err == nil {
			_ = drain.RunCordonOrUncordon(&drain.Helper{Ctx: context.Background(), Client: cs, Out: &out, ErrOut: &errOut}, n, false)
		}
	})
	start := time.Now()
	if err := drain.RunNodeDrain(h, target); err != nil {
		w.Stop()
		t.Fatalf("drain of %s: %v\n%s%s\n%s", target, err, out.String(), errOut.String(), podSummary(ctx, ns))
	}
	// Whether the API server had to refuse the second wsnode depends on
	// how soon its first one's replacement was Ready: said, not checked.
	t.Logf("drained %s in %s; evictions refused by a budget: %d", target, time.Since(start).Round(100*time.Millisecond),
		strings.Count(errOut.String(), "disruption budget"))
	// Bounded apart: a wsnode Pending for good (the former spread rule,
	// which counted the cordoned node) fails here, not at the deadline.
	after, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	err = poll(after, func() error {
		byNode, n, pending := wsnodesByNode(ctx, t, ns, rel)
		if n != 4 || pending != 0 || byNode[target] != 0 {
			return fmt.Errorf("wsnodes ready per node %v, %d Pending", byNode, pending)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the drain: %v\n%s", err, podSummary(ctx, ns))
	}
	w.Stop()
	if least := <-fewest; least < 3 {
		t.Errorf("%d wsnodes were ready at one point of the drain; the budget allows one of four to go", least)
	}
	waitAvailable(ctx, t, ns, rel)
}

func wsnodeSelector(release string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: instanceLabel + "=" + release + ",app.kubernetes.io/name=wsnode"}
}

// TestTaintedPool: a pool of nodes tainted NoSchedule beside the three
// untainted ones. With tolerations given by values and the chart's spread
// (DoNotSchedule among the nodes the pod may run on), wsnodes spread over
// both pools, past one per untainted node. Without tolerations the
// chart's spread ignores the pool and fills the untainted nodes; the
// former hard rule (DoNotSchedule over every node) counts the pool as
// empty domains and leaves all but one wsnode per untainted node Pending.
func TestTaintedPool(t *testing.T) {
	ctx := needCluster(t, 6*time.Minute)
	// A node another test cordoned loses its taint a moment after.
	if err := waitNodesSchedulable(ctx, baseNodes, nil); err != nil {
		t.Fatal(err)
	}
	taint := corev1.Taint{Key: "pool", Value: "realtime", Effect: corev1.TaintEffectNoSchedule}
	var pool []string
	for i := range 3 {
		name := fmt.Sprintf("pool-%d", i)
		if err := createNode(ctx, name, map[string]string{"pool": "realtime", "topology.kubernetes.io/zone": "zone-" + string(rune('a'+i))}, []corev1.Taint{taint}); err != nil {
			t.Fatal(err)
		}
		pool = append(pool, name)
		// Registered before the namespaces, so run after they are gone.
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	if err := waitNodesSchedulable(ctx, pool, []corev1.Taint{taint}); err != nil {
		t.Fatal(err)
	}
	// No Redis of their own: this is about wsnodes.
	noRedis := []string{"--set", "redis.mode=url,redis.url=redis://redis.example:6379,wsnode.autoscaling.enabled=false"}

	t.Run("tolerated", func(t *testing.T) {
		ns := namespace(ctx, t, "pool-tolerated")
		tol := valuesFile(t, `wsnode:
  replicas: 9
  tolerations:
    - {key: pool, operator: Equal, value: realtime, effect: NoSchedule}
`)
		helm(t, append([]string{"install", "tol", chartDir, "-n", ns, "--values", tol}, noRedis...)...)
		waitAvailable(ctx, t, ns, "tol")
		byNode, n, _ := wsnodesByNode(ctx, t, ns, "tol")
		for _, node := range append(append([]string{}, baseNodes...), pool...) {
			if byNode[node] < 1 || byNode[node] > 2 {
				t.Errorf("node %s has %d wsnodes, want 1 or 2 of 9 over 6 nodes: %v", node, byNode[node], byNode)
			}
		}
		if n != 9 {
			t.Errorf("%d wsnodes ready, want 9", n)
		}
	})

	t.Run("untolerated", func(t *testing.T) {
		ns := namespace(ctx, t, "pool-untolerated")
		helm(t, append([]string{"install", "new", chartDir, "-n", ns, "--set", "wsnode.replicas=6"}, noRedis...)...)
		waitAvailable(ctx, t, ns, "new")
		byNode, _, _ := wsnodesByNode(ctx, t, ns, "new")
		for _, node := range baseNodes {
			if byNode[node] != 2 {
				t.Errorf("wsnodes per node %v, want 2 on each untainted node", byNode)
				break
			}
		}
	})

	t.Run("former hard rule", func(t *testing.T) {
		ns := namespace(ctx, t, "pool-old-rule")
		old := valuesFile(t, `wsnode:
  replicas: 6
  topologySpreadConstraints:
    - maxSkew: 1
      topologyKey: kubernetes.io/hostname
      whenUnsatisfiable: DoNotSchedule
      labelSelector:
        matchLabels: {app.kubernetes.io/name: wsnode, app.kubernetes.io/instance: old}
`)
		helm(t, append([]string{"install", "old", chartDir, "-n", ns, "--values", old}, noRedis...)...)
		err := poll(ctx, func() error {
			byNode, n, _ := wsnodesByNode(ctx, t, ns, "old")
			unschedulable := 0
			for _, p := range podsOf(ctx, t, ns, "old", "wsnode") {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
						unschedulable++
					}
				}
			}
			if n != 3 || unschedulable != 3 {
				return fmt.Errorf("%d wsnodes ready %v, %d unschedulable; want 3 and 3", n, byNode, unschedulable)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, podSummary(ctx, ns))
		}
		var why []string
		for _, p := range podsOf(ctx, t, ns, "old", "wsnode") {
			for _, c := range p.Status.Conditions {
				if c.Reason == corev1.PodReasonUnschedulable {
					why = append(why, c.Message)
				}
			}
		}
		sort.Strings(why)
		t.Logf("the former rule: 3 of 6 wsnodes Pending: %s", why[0])
	})
}
