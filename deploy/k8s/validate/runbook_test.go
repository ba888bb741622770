package validate

// The chart's objects for the runbooks of docs/OPERATIONS.md: the audit's
// CronJobs, which run `cleaner audit` with the cleaner's settings in pods
// of their own, and the toolbox, a redis-cli pod the NetworkPolicies admit
// to Redis.

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/diff"
)

func cronJob(t *testing.T, s *Set, name string) *batchv1.CronJob {
	t.Helper()
	for _, cj := range s.CronJobs {
		if cj.Name == name {
			return cj
		}
	}
	t.Fatalf("no CronJob %s", name)
	return nil
}

// TestChartAudit: in every chart target the audit's CronJobs run `cleaner
// audit` (and `--repair`) with the cleaner Deployment's image, env, config
// and volumes, compared whole so they cannot drift apart, once per Job;
// suspended by default, scheduled when audit.suspend is false, the repair
// never; none with audit.enabled false.
func TestChartAudit(t *testing.T) {
	targets, err := testChart(t).Targets()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			s := load(t, tg.Name)
			cl := deploy(t, s, "cleaner").Spec.Template.Spec
			for name, args := range map[string][]string{"headcount-audit": {"audit"}, "headcount-audit-repair": {"audit", "--repair"}} {
				cj := cronJob(t, s, name)
				job := cj.Spec.JobTemplate.Spec
				pod := job.Template.Spec
				c := pod.Containers[0]
				if len(pod.Containers) != 1 || c.Command[0] != BinaryDir+"/cleaner" || len(c.Command) != 1 || !slices.Equal(c.Args, args) {
					t.Errorf("%s runs %v %v, want %s/cleaner %v", name, c.Command, c.Args, BinaryDir, args)
				}
				if cj.Spec.Suspend == nil || !*cj.Spec.Suspend {
					t.Errorf("%s is not suspended", name)
				}
				if pod.RestartPolicy != corev1.RestartPolicyNever || job.BackoffLimit == nil || *job.BackoffLimit != 0 {
					t.Errorf("%s: restartPolicy %s, backoffLimit %v: want one pod per Job, its exit code the verdict", name, pod.RestartPolicy, job.BackoffLimit)
				}
				same := func(what string, want, got any) {
					if !equality.Semantic.DeepEqual(want, got) {
						t.Errorf("%s: %s differs from the cleaner's (- cleaner, + audit):\n%s", name, what, diff.Diff(want, got))
					}
				}
				cc := cl.Containers[0]
				same("image", cc.Image, c.Image)
				same("env", cc.Env, c.Env)
				same("envFrom", cc.EnvFrom, c.EnvFrom)
				same("volumeMounts", cc.VolumeMounts, c.VolumeMounts)
				same("volumes", cl.Volumes, pod.Volumes)
				same("pod securityContext", cl.SecurityContext, pod.SecurityContext)
				same("container securityContext", cc.SecurityContext, c.SecurityContext)
				same("serviceAccountName", cl.ServiceAccountName, pod.ServiceAccountName)
			}
		})
	}

	s := renderChart(t, "", "--set", "audit.suspend=false", "--set", "audit.schedule=*/20 * * * *")
	if cj := cronJob(t, s, "headcount-audit"); *cj.Spec.Suspend || cj.Spec.Schedule != "*/20 * * * *" {
		t.Errorf("audit.suspend false, audit.schedule */20: suspend %v, schedule %q", *cj.Spec.Suspend, cj.Spec.Schedule)
	}
	if cj := cronJob(t, s, "headcount-audit-repair"); !*cj.Spec.Suspend {
		t.Error("audit.suspend false unsuspends the repair: a schedule would repair what the audit should show")
	}
	if s := renderChart(t, "", "--set", "audit.enabled=false"); len(s.CronJobs) > 0 {
		t.Errorf("audit.enabled false still renders %d CronJobs", len(s.CronJobs))
	}
}

// pod is one pod a NetworkPolicy may select: its namespace, labels and
// spec (for named ports).
type pod struct {
	name, ns string
	labels   map[string]string
	spec     *corev1.PodSpec
}

func podsOf(s *Set, ns string) []pod {
	var out []pod
	for _, w := range s.Workloads() {
		out = append(out, pod{w.ID(), ns, w.Template.Labels, &w.Template.Spec})
	}
	return out
}

// strangers are pods the chart must not let in: another application in
// the namespace, a debug pod labelled like the toolbox of another release,
// a headcount pod of another release, and a pod of the monitoring
// namespace.
var strangers = []pod{
	{"another application", "headcount", map[string]string{"app": "other"}, &corev1.PodSpec{}},
	{"another release's toolbox", "headcount", map[string]string{nameLabel: toolbox, instanceLabel: "other"}, &corev1.PodSpec{}},
	{"another release's cleaner", "headcount", map[string]string{nameLabel: "cleaner", partOfLabel: partOf, instanceLabel: "other"}, &corev1.PodSpec{}},
	{"a monitoring pod", "monitoring", map[string]string{"app": "prometheus"}, &corev1.PodSpec{}},
}

// kubeDNS is the cluster's DNS as the policies name it.
var kubeDNS = pod{"kube-dns", "kube-system", map[string]string{"k8s-app": "kube-dns"}, &corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 53}}}}}}

// admits says whether the render's NetworkPolicies (all in ns) let from
// open a connection to port of to, as Kubernetes decides: the egress of
// from's policies and the ingress of to's, a pod no policy of a direction
// selects being open that way.
func admits(s *Set, ns string, from, to pod, port int32) bool {
	return allows(s, ns, from, networkingv1.PolicyTypeEgress, to, to, port) && allows(s, ns, to, networkingv1.PolicyTypeIngress, from, to, port)
}

func allows(s *Set, ns string, self pod, dir networkingv1.PolicyType, peer, target pod, port int32) bool {
	isolated := false
	for _, np := range s.NetworkPolicies {
		if self.ns != ns || !selects(&np.Spec.PodSelector, self.labels) || !hasPolicyType(np, dir) {
			continue
		}
		isolated = true
		type rule struct {
			peers []networkingv1.NetworkPolicyPeer
			ports []networkingv1.NetworkPolicyPort
		}
		var rules []rule
		for _, r := range np.Spec.Ingress {
			if dir == networkingv1.PolicyTypeIngress {
				rules = append(rules, rule{r.From, r.Ports})
			}
		}
		for _, r := range np.Spec.Egress {
			if dir == networkingv1.PolicyTypeEgress {
				rules = append(rules, rule{r.To, r.Ports})
			}
		}
		for _, r := range rules {
			if peerIn(r.peers, ns, peer) && portIn(r.ports, target, port) {
				return true
			}
		}
	}
	return !isolated
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	ls, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && ls.Matches(labels.Set(l))
}

func peerIn(peers []networkingv1.NetworkPolicyPeer, ns string, p pod) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		switch {
		case peer.IPBlock != nil:
			return true // an address range may hold any pod
		case peer.NamespaceSelector != nil:
			if selects(peer.NamespaceSelector, map[string]string{"kubernetes.io/metadata.name": p.ns}) && (peer.PodSelector == nil || selects(peer.PodSelector, p.labels)) {
				return true
			}
		case peer.PodSelector != nil:
			if p.ns == ns && selects(peer.PodSelector, p.labels) {
				return true
			}
		}
	}
	return false
}

func portIn(ports []networkingv1.NetworkPolicyPort, target pod, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Port == nil || p.Port.String() == strconv.Itoa(int(port)) {
			return true
		}
		if cp, _ := ContainerPort(target.spec, p.Port.String()); cp != nil && cp.ContainerPort == port {
			return true
		}
	}
	return false
}

// TestChartRedisClients: the single Redis admits the release's binaries,
// the audit's pods and, with toolbox.enabled, the toolbox, and nobody
// else; the toolbox reaches DNS and Redis and nothing else, and nothing
// reaches it.
func TestChartRedisClients(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("toolbox.enabled=%v", on), func(t *testing.T) {
			s := renderChart(t, "", "--set", fmt.Sprintf("toolbox.enabled=%v", on))
			pods := podsOf(s, "headcount")
			var redis pod
			for _, p := range pods {
				if p.labels[nameLabel] == "redis" {
					redis = p
				}
			}
			var got []string
			for _, p := range append(pods, strangers...) {
				if p.name != redis.name && admits(s, "headcount", p, redis, 6379) {
					got = append(got, p.name)
				}
			}
			want := []string{"CronJob/headcount-audit", "CronJob/headcount-audit-repair", "Deployment/headcount-cleaner", "Deployment/headcount-httpapi", "Deployment/headcount-wsnode"}
			if on {
				want = append(want, "Deployment/headcount-toolbox")
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("Redis admits %v, want %v", got, want)
			}
			if !on {
				if d := s.Deployment("headcount-toolbox"); d != nil {
					t.Error("toolbox.enabled false renders a toolbox")
				}
				return
			}
			var tb pod
			for _, p := range pods {
				if p.labels[nameLabel] == toolbox {
					tb = p
				}
			}
			if !admits(s, "headcount", tb, kubeDNS, 53) {
				t.Error("the toolbox cannot reach DNS")
			}
			web := pod{"a web server", "elsewhere", map[string]string{}, &corev1.PodSpec{}}
			for _, to := range append(slices.Clone(pods), web) {
				for _, port := range []int32{443, 6001, 8080, 9602} {
					if to.name != tb.name && admits(s, "headcount", tb, to, port) {
						t.Errorf("the toolbox reaches %s on port %d", to.name, port)
					}
				}
			}
			for _, from := range append(slices.Clone(pods), strangers...) {
				if from.name != tb.name && admits(s, "headcount", from, tb, 6379) {
					t.Errorf("%s reaches the toolbox", from.name)
				}
			}
		})
	}
}

// TestChartToolbox: the toolbox has redis-cli (the single Redis's image),
// the Redis password from the binaries' Secret in REDISCLI_AUTH, and the
// TLS files where the binaries have them; an external Redis's ports are
// open to it as to the binaries.
func TestChartToolbox(t *testing.T) {
	s := load(t, chartSentinel)
	tb := deploy(t, s, "toolbox").Spec.Template.Spec
	c := tb.Containers[0]
	if c.Image != "redis:7.4-alpine" {
		t.Errorf("the toolbox's image %s is not redis.single.image", c.Image)
	}
	checkEnvFrom(t, "the toolbox", c.Env, map[string]string{"REDISCLI_AUTH": ""}, "headcount-redis")
	cl := deploy(t, s, "cleaner").Spec.Template.Spec
	tls := func(spec corev1.PodSpec) (string, string) {
		for _, v := range spec.Volumes {
			if v.Name == "redis-tls" {
				for _, m := range spec.Containers[0].VolumeMounts {
					if m.Name == v.Name {
						return v.Secret.SecretName, m.MountPath
					}
				}
			}
		}
		return "", ""
	}
	if ws, wp := tls(cl); ws == "" {
		t.Fatal("the cleaner mounts no TLS Secret")
	} else if gs, gp := tls(tb); gs != ws || gp != wp {
		t.Errorf("the toolbox mounts the TLS Secret %q at %q, the binaries %q at %q", gs, gp, ws, wp)
	}
	tbPod := pod{"toolbox", "headcount", s.Deployment("headcount-toolbox").Spec.Template.Labels, &tb}
	cleaner := pod{"cleaner", "headcount", s.Deployment("headcount-cleaner").Spec.Template.Labels, &cl}
	sentinel := pod{"sentinel", "redis", map[string]string{}, &corev1.PodSpec{}}
	for _, port := range []int32{26379, 6379} {
		if !admits(s, "headcount", cleaner, sentinel, port) || !admits(s, "headcount", tbPod, sentinel, port) {
			t.Errorf("port %d of the namespace redis: the cleaner reaches it %v, the toolbox %v", port, admits(s, "headcount", cleaner, sentinel, port), admits(s, "headcount", tbPod, sentinel, port))
		}
	}
}
