package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Check is one semantic rule over a rendered target.
type Check struct {
	Name string
	// Doc says what the rule protects against.
	Doc string
	Run func(s *Set) []error
}

// Checks are the semantic rules, in report order.
var Checks = []Check{
	{"namespace", "every object in the one Namespace the render creates", checkNamespace},
	{"references", "ConfigMaps, Secrets, ServiceAccounts and volumes that pods name exist", checkReferences},
	{"selectors", "workload selectors match their pod labels; StatefulSets' Services select them", checkSelectors},
	{"services", "Services select pods, and their target ports exist on those pods", checkServices},
	{"hpa", "HPAs target an existing Deployment that leaves replicas to them, on CPU with CPU requests", checkHPAs},
	{"availability", "every workload has a PDB that selects it and still allows a disruption; two cleaners", checkAvailability},
	{"probes", "readiness on /readyz, liveness on /healthz, on the port the binary's admin listener uses", checkProbes},
	{"ports", "the WebSocket and HTTP API container ports are where the binaries listen", checkPorts},
	{"grace", "terminationGracePeriodSeconds covers preStop, the wsnode drain and the shutdown tail", checkGrace},
	{"resources", "every container has CPU and memory requests and limits; GOMEMLIMIT below the limit", checkResources},
	{"security", "non-root, read-only root, no privilege escalation, ALL capabilities dropped, seccomp", checkSecurity},
	{"apps-secret", "the apps file comes from a mounted Secret that holds a valid apps array, or the apps database URL from a Secret", checkAppsSecret},
	{"redis-tls", "the Redis TLS files are keys of mounted Secrets in the render", checkRedisTLS},
	{"configmap-secrets", "no secret-looking key or value in a ConfigMap or a literal env var", checkConfigMapSecrets},
	{"commands", "each headcount container runs its own binary from the image", checkCommands},
	{"redis", "Redis is configured, and an in-cluster Redis URL names a Service of the render", checkRedis},
	{"networkpolicy", "default deny, DNS egress, only wsnode/httpapi public ports open, Redis only from headcount and its toolbox, cleaners reach the wsnodes' admin port", checkNetworkPolicies},
	{"spread", "replicated headcount workloads spread over nodes and zones, never hard over nodes they may not run on", checkSpread},
	{"servicemonitor", "ServiceMonitors select a Service that has their port", checkServiceMonitors},
	{"ingress", "an Ingress routes /app/ to wsnode and /apps/ to httpapi, with TLS and WebSocket-long proxy timeouts", checkIngresses},
	{"prometheusrule", "PrometheusRule groups are named once each; each rule alerts or records an expression", checkPrometheusRules},
}

// Check runs every rule; each error names its rule.
func (s *Set) Check() []error {
	var out []error
	for _, c := range Checks {
		for _, err := range c.Run(s) {
			out = append(out, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return out
}

// Headcount label and the binaries that take traffic from outside.
const (
	partOfLabel = "app.kubernetes.io/part-of"
	partOf      = "headcount"
	nameLabel   = "app.kubernetes.io/name"
)

// publicBinaries serve their --addr to the world; the rest serve nothing
// but their admin port, which only monitoring may reach.
var publicBinaries = map[string]bool{"wsnode": true, "httpapi": true}

// shutdownTail is how long a binary may take after SIGTERM beyond
// --drain, from pkg/wsnode/app.go and pkg/httpapi/app.go: wsnode shuts its
// listener (2s), waits for close handshakes after the window (5s),
// removes its counts (5s) and stops the admin server (1s); httpapi lets
// requests finish (5s) and then its admin server (5s); the cleaner
// releases its lease and stops its admin server (1s, 1s).
var shutdownTail = map[string]time.Duration{
	"wsnode":  13 * time.Second,
	"httpapi": 10 * time.Second,
	"cleaner": 2 * time.Second,
}

type containerRef struct {
	w Workload
	c *corev1.Container
	// binary is the headcount binary, or "" for another container.
	binary string
}

func (r containerRef) id() string { return r.w.ID() + " container " + r.c.Name }

// containers lists every container (init containers too) of every workload.
func (s *Set) containers(withInit bool) []containerRef {
	var out []containerRef
	for _, w := range s.Workloads() {
		spec := &w.Template.Spec
		for i := range spec.Containers {
			out = append(out, containerRef{w, &spec.Containers[i], Binary(&spec.Containers[i])})
		}
		if withInit {
			for i := range spec.InitContainers {
				out = append(out, containerRef{w, &spec.InitContainers[i], ""})
			}
		}
	}
	return out
}

func isHeadcount(w Workload) bool { return w.Template.Labels[partOfLabel] == partOf }

func checkNamespace(s *Set) []error {
	if len(s.Namespaces) != 1 {
		return []error{fmt.Errorf("want exactly one Namespace in the render, found %d", len(s.Namespaces))}
	}
	ns := s.Namespaces[0].Name
	var errs []error
	for _, o := range s.Objects {
		if got := o.Typed.(metav1.Object).GetNamespace(); o.Kind != "Namespace" && got != ns {
			errs = append(errs, fmt.Errorf("%s is in namespace %q, not %q", o.ID(), got, ns))
		}
	}
	return errs
}

func checkReferences(s *Set) []error {
	var errs []error
	for _, w := range s.Workloads() {
		spec := &w.Template.Spec
		if sa := spec.ServiceAccountName; sa != "" && sa != "default" && !slices.ContainsFunc(s.Objects, func(o *Object) bool { return o.Kind == "ServiceAccount" && o.Name == sa }) {
			errs = append(errs, fmt.Errorf("%s: ServiceAccount %q is not in the render", w.ID(), sa))
		}
		vols := map[string]bool{}
		for _, st := range s.StatefulSets {
			if w.Kind == "StatefulSet" && st.Name == w.Name {
				for _, vct := range st.Spec.VolumeClaimTemplates {
					vols[vct.Name] = true
				}
			}
		}
		for _, v := range spec.Volumes {
			vols[v.Name] = true
			if v.Secret != nil && !isTrue(v.Secret.Optional) && s.Secret(v.Secret.SecretName) == nil {
				errs = append(errs, fmt.Errorf("%s: volume %s: Secret %q is not in the render", w.ID(), v.Name, v.Secret.SecretName))
			}
			if v.ConfigMap != nil && !isTrue(v.ConfigMap.Optional) && s.ConfigMap(v.ConfigMap.Name) == nil {
				errs = append(errs, fmt.Errorf("%s: volume %s: ConfigMap %q is not in the render", w.ID(), v.Name, v.ConfigMap.Name))
			}
		}
		for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && !isTrue(ef.ConfigMapRef.Optional) && s.ConfigMap(ef.ConfigMapRef.Name) == nil {
					errs = append(errs, fmt.Errorf("%s container %s: envFrom ConfigMap %q is not in the render", w.ID(), c.Name, ef.ConfigMapRef.Name))
				}
				if ef.SecretRef != nil && !isTrue(ef.SecretRef.Optional) && s.Secret(ef.SecretRef.Name) == nil {
					errs = append(errs, fmt.Errorf("%s container %s: envFrom Secret %q is not in the render", w.ID(), c.Name, ef.SecretRef.Name))
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil && !isTrue(r.Optional) {
					if cm := s.ConfigMap(r.Name); cm == nil || !hasKey(cm.Data, r.Key) {
						errs = append(errs, fmt.Errorf("%s container %s: env %s: ConfigMap %q key %q is not in the render", w.ID(), c.Name, e.Name, r.Name, r.Key))
					}
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil && !isTrue(r.Optional) {
					if sec := s.Secret(r.Name); sec == nil || (sec.Data[r.Key] == nil && !hasKey(sec.StringData, r.Key)) {
						errs = append(errs, fmt.Errorf("%s container %s: env %s: Secret %q key %q is not in the render", w.ID(), c.Name, e.Name, r.Name, r.Key))
					}
				}
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					errs = append(errs, fmt.Errorf("%s container %s: mounts volume %q, which the pod does not have", w.ID(), c.Name, m.Name))
				}
			}
		}
	}
	return errs
}

func isTrue(b *bool) bool { return b != nil && *b }

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func checkSelectors(s *Set) []error {
	var errs []error
	for _, w := range s.Workloads() {
		if w.RunsOnce() {
			continue
		}
		if w.Selector == nil || len(w.Selector.MatchLabels)+len(w.Selector.MatchExpressions) == 0 {
			errs = append(errs, fmt.Errorf("%s: no selector", w.ID()))
			continue
		}
		ls, err := metav1.LabelSelectorAsSelector(w.Selector)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: selector: %w", w.ID(), err))
			continue
		}
		if !ls.Matches(labels.Set(w.Template.Labels)) {
			errs = append(errs, fmt.Errorf("%s: selector %s does not match its pod labels %v", w.ID(), ls, w.Template.Labels))
		}
		// Another workload's pods under this selector would be adopted or
		// fought over.
		for _, o := range s.Workloads() {
			if o.ID() != w.ID() && ls.Matches(labels.Set(o.Template.Labels)) {
				errs = append(errs, fmt.Errorf("%s: selector %s also matches the pods of %s", w.ID(), ls, o.ID()))
			}
		}
	}
	for _, st := range s.StatefulSets {
		svc := s.Service(st.Spec.ServiceName)
		if svc == nil {
			errs = append(errs, fmt.Errorf("StatefulSet/%s: serviceName %q is not a Service of the render", st.Name, st.Spec.ServiceName))
			continue
		}
		if !slices.ContainsFunc(s.SelectedByMap(svc.Spec.Selector), func(w Workload) bool { return w.Kind == "StatefulSet" && w.Name == st.Name }) {
			errs = append(errs, fmt.Errorf("StatefulSet/%s: its Service %s does not select its pods", st.Name, svc.Name))
		}
	}
	return errs
}

func checkServices(s *Set) []error {
	var errs []error
	for _, svc := range s.Services {
		// A Job's pod is no backend: the endpoints leave out a pod without
		// the target port.
		ws := slices.DeleteFunc(s.SelectedByMap(svc.Spec.Selector), Workload.RunsOnce)
		if len(ws) == 0 {
			errs = append(errs, fmt.Errorf("Service/%s: selector %v selects no pods of the render", svc.Name, svc.Spec.Selector))
			continue
		}
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP && ws[0].Template.Labels[nameLabel] == "wsnode" {
			errs = append(errs, fmt.Errorf("Service/%s: session affinity is not needed (any wsnode serves any client) and skews load", svc.Name))
		}
		for _, p := range svc.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			for _, w := range ws {
				if cp, _ := ContainerPort(&w.Template.Spec, target.String()); cp == nil {
					errs = append(errs, fmt.Errorf("Service/%s port %s: target port %s is not a container port of %s", svc.Name, p.Name, target.String(), w.ID()))
				}
			}
		}
	}
	return errs
}

func checkHPAs(s *Set) []error {
	var errs []error
	for _, h := range s.HPAs {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler/%s: targets %s %s, want an apps/v1 Deployment", h.Name, ref.APIVersion, ref.Kind))
			continue
		}
		d := s.Deployment(ref.Name)
		if d == nil {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler/%s: Deployment %q is not in the render", h.Name, ref.Name))
			continue
		}
		if d.Spec.Replicas != nil {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler/%s: Deployment/%s sets replicas, which every apply would reset under the autoscaler", h.Name, d.Name))
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler/%s: minReplicas below 2 leaves no replica to fail over to", h.Name))
		}
		cpu := false
		for _, m := range h.Spec.Metrics {
			if m.Resource == nil {
				continue
			}
			cpu = cpu || m.Resource.Name == corev1.ResourceCPU
			// Utilization is relative to requests: without one the
			// autoscaler cannot compute it and does nothing.
			for _, c := range d.Spec.Template.Spec.Containers {
				if _, ok := c.Resources.Requests[m.Resource.Name]; !ok {
					errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler/%s: scales on %s but container %s of Deployment/%s requests none", h.Name, m.Resource.Name, c.Name, d.Name))
				}
			}
		}
		if !cpu {
			errs = append(errs, fmt.Errorf("HorizontalPodAutoscaler/%s: no CPU resource metric", h.Name))
		}
	}
	return errs
}

// replicas is how many pods a workload runs at least: its HPA's
// minReplicas, its replicas, or the API server's default of 1.
func (s *Set) replicas(w Workload) int32 {
	for _, h := range s.HPAs {
		if h.Spec.ScaleTargetRef.Kind == w.Kind && h.Spec.ScaleTargetRef.Name == w.Name && h.Spec.MinReplicas != nil {
			return *h.Spec.MinReplicas
		}
	}
	if w.Replicas != nil {
		return *w.Replicas
	}
	return 1
}

func checkAvailability(s *Set) []error {
	var errs []error
	covered := map[string]bool{}
	for _, p := range s.PDBs {
		ws, err := s.Selected(p.Spec.Selector)
		if err != nil {
			errs = append(errs, fmt.Errorf("PodDisruptionBudget/%s: selector: %w", p.Name, err))
			continue
		}
		if len(ws) == 0 {
			errs = append(errs, fmt.Errorf("PodDisruptionBudget/%s: selects no pods of the render", p.Name))
		}
		for _, w := range ws {
			covered[w.ID()] = true
			n := int(s.replicas(w))
			// A budget that allows no eviction blocks every node drain.
			switch {
			case p.Spec.MinAvailable != nil:
				min, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, n, true)
				if err != nil || min >= n {
					errs = append(errs, fmt.Errorf("PodDisruptionBudget/%s: minAvailable %s of %d pods of %s allows no eviction", p.Name, p.Spec.MinAvailable.String(), n, w.ID()))
				}
				if w.Template.Labels[nameLabel] == "cleaner" && (err != nil || min < 1) {
					errs = append(errs, fmt.Errorf("PodDisruptionBudget/%s: the cleaner needs minAvailable 1", p.Name))
				}
			case p.Spec.MaxUnavailable != nil:
				max, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, n, true)
				if err != nil || max < 1 {
					errs = append(errs, fmt.Errorf("PodDisruptionBudget/%s: maxUnavailable %s of %d pods of %s allows no eviction", p.Name, p.Spec.MaxUnavailable.String(), n, w.ID()))
				}
			}
		}
	}
	for _, w := range s.Workloads() {
		if !isHeadcount(w) || w.RunsOnce() {
			continue // a single Redis has no budget: it would block drains
		}
		if !covered[w.ID()] {
			errs = append(errs, fmt.Errorf("%s: no PodDisruptionBudget selects it", w.ID()))
		}
		if w.Template.Labels[nameLabel] == "cleaner" && s.replicas(w) < 2 {
			errs = append(errs, fmt.Errorf("%s: %d replica(s); active/passive needs 2", w.ID(), s.replicas(w)))
		}
	}
	return errs
}

// probePort resolves a probe's port on the container it belongs to.
func probePort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		return p.IntVal, true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func checkProbes(s *Set) []error {
	var errs []error
	for _, r := range s.containers(false) {
		probes := map[string]*corev1.Probe{"readiness": r.c.ReadinessProbe, "liveness": r.c.LivenessProbe, "startup": r.c.StartupProbe}
		for _, kind := range []string{"readiness", "liveness", "startup"} {
			p := probes[kind]
			if p == nil {
				continue
			}
			var port *intstr.IntOrString
			switch {
			case p.HTTPGet != nil:
				port = &p.HTTPGet.Port
			case p.TCPSocket != nil:
				port = &p.TCPSocket.Port
			case p.GRPC != nil:
				port = &intstr.IntOrString{IntVal: p.GRPC.Port}
			}
			if port != nil {
				if _, ok := probePort(r.c, *port); !ok {
					errs = append(errs, fmt.Errorf("%s: %s probe port %q is not a port of the container", r.id(), kind, port.String()))
				}
			}
		}
		if r.binary == "" || r.w.RunsOnce() {
			continue
		}
		admin, from := s.Setting(r.c, "admin-addr")
		adminPort, err := AddrPort(admin)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: admin address %q (%s) has no port: the probes need it", r.id(), admin, from))
			continue
		}
		// Liveness on /readyz would restart every node while Redis is
		// down, and a draining wsnode before its drain is done.
		for _, want := range []struct{ kind, path string }{{"readiness", "/readyz"}, {"liveness", "/healthz"}} {
			p := probes[want.kind]
			if p == nil || p.HTTPGet == nil {
				errs = append(errs, fmt.Errorf("%s: needs an httpGet %s probe on %s", r.id(), want.kind, want.path))
				continue
			}
			if p.HTTPGet.Path != want.path {
				errs = append(errs, fmt.Errorf("%s: %s probe gets %q, want %s", r.id(), want.kind, p.HTTPGet.Path, want.path))
			}
			if n, ok := probePort(r.c, p.HTTPGet.Port); ok && strconv.Itoa(int(n)) != adminPort {
				errs = append(errs, fmt.Errorf("%s: %s probe port %s is %d, but the admin listener is on %s (%s)", r.id(), want.kind, p.HTTPGet.Port.String(), n, adminPort, from))
			}
			if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				errs = append(errs, fmt.Errorf("%s: %s probe uses HTTPS; the admin listener is plain HTTP", r.id(), want.kind))
			}
		}
	}
	return errs
}

func checkPorts(s *Set) []error {
	var errs []error
	for _, r := range s.containers(false) {
		if r.binary == "" || r.w.RunsOnce() {
			continue
		}
		admin, from := s.Setting(r.c, "admin-addr")
		if port, err := AddrPort(admin); err == nil {
			if cp, _ := ContainerPort(&corev1.PodSpec{Containers: []corev1.Container{*r.c}}, "metrics"); cp == nil || strconv.Itoa(int(cp.ContainerPort)) != port {
				errs = append(errs, fmt.Errorf("%s: needs a container port named metrics on %s, where its admin listener is (%s)", r.id(), port, from))
			}
		}
		if !publicBinaries[r.binary] {
			continue
		}
		addr, from := s.Setting(r.c, "addr")
		port, err := AddrPort(addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: listen address %q (%s): %w", r.id(), addr, from, err))
			continue
		}
		if !slices.ContainsFunc(r.c.Ports, func(p corev1.ContainerPort) bool { return strconv.Itoa(int(p.ContainerPort)) == port }) {
			errs = append(errs, fmt.Errorf("%s: listens on %s (%s) but declares no container port %s", r.id(), addr, from, port))
		}
	}
	return errs
}

func checkGrace(s *Set) []error {
	var errs []error
	for _, r := range s.containers(false) {
		grace := 30 * time.Second // the API server's default
		if g := r.w.Template.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		var preStop time.Duration
		if r.c.Lifecycle != nil && r.c.Lifecycle.PreStop != nil {
			h := r.c.Lifecycle.PreStop
			switch {
			case h.Sleep != nil:
				preStop = time.Duration(h.Sleep.Seconds) * time.Second
			case h.Exec != nil && r.binary != "":
				errs = append(errs, fmt.Errorf("%s: preStop exec %v cannot run: the image has no shell or sleep; use a sleep action", r.id(), h.Exec.Command))
			}
		}
		if r.binary == "" {
			if preStop >= grace {
				errs = append(errs, fmt.Errorf("%s: preStop %v is not shorter than the grace period %v", r.id(), preStop, grace))
			}
			continue
		}
		need := preStop + shutdownTail[r.binary]
		detail := fmt.Sprintf("preStop %v + shutdown tail %v", preStop, shutdownTail[r.binary])
		if r.binary == "wsnode" {
			v, from := s.Setting(r.c, "drain")
			drain, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: drain %q (%s) is not a duration", r.id(), v, from))
				continue
			}
			need += drain
			detail = fmt.Sprintf("preStop %v + drain %v (%s) + shutdown tail %v", preStop, drain, from, shutdownTail[r.binary])
		}
		if grace <= need {
			errs = append(errs, fmt.Errorf("%s: terminationGracePeriodSeconds %v must exceed %s = %v, or the kubelet kills it mid-shutdown", r.id(), grace, detail, need))
		}
	}
	return errs
}

// goMemLimit parses GOMEMLIMIT (runtime/debug's syntax: bytes with an
// optional B, KiB, MiB, GiB or TiB suffix).
func goMemLimit(v string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		s string
		m int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.s); ok {
			v, mult = n, u.m
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n * mult, err
}

func checkResources(s *Set) []error {
	var errs []error
	for _, r := range s.containers(true) {
		res := r.c.Resources
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := res.Requests[name]
			lim, hasLim := res.Limits[name]
			if !hasReq {
				errs = append(errs, fmt.Errorf("%s: no %s request", r.id(), name))
			}
			if !hasLim {
				errs = append(errs, fmt.Errorf("%s: no %s limit", r.id(), name))
			}
			if hasReq && hasLim && req.Cmp(lim) > 0 {
				errs = append(errs, fmt.Errorf("%s: %s request %s above its limit %s", r.id(), name, req.String(), lim.String()))
			}
		}
		if v, ok := s.Env(r.c)["GOMEMLIMIT"]; ok && v != "off" {
			n, err := goMemLimit(v)
			lim, hasLim := res.Limits[corev1.ResourceMemory]
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: GOMEMLIMIT %q: %w", r.id(), v, err))
			case hasLim && n >= lim.Value():
				errs = append(errs, fmt.Errorf("%s: GOMEMLIMIT %s is not below the memory limit %s: the kernel kills before the GC tries", r.id(), v, lim.String()))
			}
		}
	}
	return errs
}

func checkSecurity(s *Set) []error {
	var errs []error
	for _, w := range s.Workloads() {
		spec := &w.Template.Spec
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			errs = append(errs, fmt.Errorf("%s: shares a host namespace", w.ID()))
		}
		if isHeadcount(w) && !isFalse(spec.AutomountServiceAccountToken) {
			errs = append(errs, fmt.Errorf("%s: mounts a service account token it never uses (automountServiceAccountToken: false)", w.ID()))
		}
		pod := spec.SecurityContext
		if pod == nil {
			pod = &corev1.PodSecurityContext{}
		}
		all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
		for i := range all {
			c := &all[i]
			id := w.ID() + " container " + c.Name
			sc := c.SecurityContext
			if sc == nil {
				errs = append(errs, fmt.Errorf("%s: no securityContext", id))
				continue
			}
			nonRoot := sc.RunAsNonRoot
			if nonRoot == nil {
				nonRoot = pod.RunAsNonRoot
			}
			if !isTrue(nonRoot) {
				errs = append(errs, fmt.Errorf("%s: runAsNonRoot is not true", id))
			}
			user := sc.RunAsUser
			if user == nil {
				user = pod.RunAsUser
			}
			if user != nil && *user == 0 {
				errs = append(errs, fmt.Errorf("%s: runs as uid 0", id))
			}
			if !isFalse(sc.AllowPrivilegeEscalation) {
				errs = append(errs, fmt.Errorf("%s: allowPrivilegeEscalation is not false", id))
			}
			if isTrue(sc.Privileged) {
				errs = append(errs, fmt.Errorf("%s: privileged", id))
			}
			if !isTrue(sc.ReadOnlyRootFilesystem) {
				errs = append(errs, fmt.Errorf("%s: readOnlyRootFilesystem is not true", id))
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
				errs = append(errs, fmt.Errorf("%s: capabilities do not drop ALL", id))
			} else if len(sc.Capabilities.Add) > 0 {
				errs = append(errs, fmt.Errorf("%s: adds capabilities %v", id, sc.Capabilities.Add))
			}
			seccomp := sc.SeccompProfile
			if seccomp == nil {
				seccomp = pod.SeccompProfile
			}
			if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
				errs = append(errs, fmt.Errorf("%s: no RuntimeDefault (or Localhost) seccomp profile", id))
			}
		}
	}
	return errs
}

func isFalse(b *bool) bool { return b != nil && !*b }

func checkAppsSecret(s *Set) []error {
	var errs []error
	for _, r := range s.containers(false) {
		if r.binary == "" {
			continue
		}
		if _, ok := s.Env(r.c)["HEADCOUNT_APP_SECRET"]; ok {
			errs = append(errs, fmt.Errorf("%s: HEADCOUNT_APP_SECRET is set; use the apps file from the Secret", r.id()))
		}
		file, from := s.Setting(r.c, "apps-file")
		db, dbFrom := s.Setting(r.c, "apps-db")
		switch {
		case file != "" && db != "":
			errs = append(errs, fmt.Errorf("%s: both an apps file (%s) and an apps database (%s): the binaries refuse the two together", r.id(), from, dbFrom))
		case db != "":
			if err := s.appsFromDatabase(r, dbFrom); err != nil {
				errs = append(errs, fmt.Errorf("%s: apps database (%s): %w", r.id(), dbFrom, err))
			}
		case file == "":
			errs = append(errs, fmt.Errorf("%s: no apps file (HEADCOUNT_APPS_FILE) or database (HEADCOUNT_APPS_DB): it would serve the default app-id/app-key/app-secret", r.id()))
		default:
			if err := s.appsFromSecret(r, file); err != nil {
				errs = append(errs, fmt.Errorf("%s: apps file %s (%s): %w", r.id(), file, from, err))
			}
		}
	}
	return errs
}

// appsFromSecret finds the Secret key that file is, through the
// container's mounts, and checks that it holds an apps array.
func (s *Set) appsFromSecret(r containerRef, file string) error {
	vol, key, err := mountedFile(r, file)
	if err != nil {
		return err
	}
	if vol.subPath != "" {
		return fmt.Errorf("mounted with subPath %s: the kubelet never updates a subPath mount, so a change to the Secret would not reach the running binaries; mount the Secret's directory", vol.subPath)
	}
	if vol.Secret == nil {
		return fmt.Errorf("volume %s is not a Secret: the apps file holds the app secrets", vol.Name)
	}
	sec := s.Secret(vol.Secret.SecretName)
	if sec == nil {
		return fmt.Errorf("Secret %q is not in the render", vol.Secret.SecretName)
	}
	data, ok := secretData(sec, key)
	if !ok {
		return fmt.Errorf("Secret %s has no key %q", sec.Name, key)
	}
	return checkAppsJSON(data)
}

// mountedVolume is the volume a file is in, and how it is mounted.
type mountedVolume struct {
	*corev1.Volume
	// subPath is the mount's subPath, when the file is mounted alone.
	subPath string
}

// mountedFile finds the volume and the key (of its Secret or ConfigMap)
// that a file path in the container is, through the container's mounts
// and the volume's items.
func mountedFile(r containerRef, file string) (mountedVolume, string, error) {
	for _, m := range r.c.VolumeMounts {
		var key string
		switch {
		case m.SubPath != "" && m.MountPath == file:
			key = m.SubPath
		case m.SubPath == "" && path.Dir(file) == path.Clean(m.MountPath):
			key = path.Base(file)
		default:
			continue
		}
		for i, v := range r.w.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			vol := mountedVolume{&r.w.Template.Spec.Volumes[i], m.SubPath}
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				items = v.Secret.Items
			case v.ConfigMap != nil:
				items = v.ConfigMap.Items
			}
			if len(items) > 0 {
				i := slices.IndexFunc(items, func(it corev1.KeyToPath) bool { return it.Path == key })
				if i < 0 {
					return vol, "", fmt.Errorf("volume %s projects no item at %s", v.Name, key)
				}
				key = items[i].Key
			}
			return vol, key, nil
		}
		return mountedVolume{}, "", fmt.Errorf("mount %s names no volume", m.Name)
	}
	return mountedVolume{}, "", errors.New("no volume mount provides it")
}

// secretData is a Secret's value of key, from data or stringData.
func secretData(sec *corev1.Secret, key string) ([]byte, bool) {
	if v, ok := sec.Data[key]; ok {
		return v, true
	}
	if v, ok := sec.StringData[key]; ok {
		return []byte(v), true
	}
	return nil, false
}

// appsFromDatabase checks HEADCOUNT_APPS_DB: from a Secret (the URL holds
// the database's password), a URL pkg/appsdb reads, and a NetworkPolicy
// that lets the pods reach its port.
func (s *Set) appsFromDatabase(r containerRef, from string) error {
	i := slices.IndexFunc(r.c.Env, func(e corev1.EnvVar) bool { return e.Name == EnvName("apps-db") })
	if i < 0 || r.c.Env[i].ValueFrom == nil || r.c.Env[i].ValueFrom.SecretKeyRef == nil {
		return fmt.Errorf("the URL holds the database's password: take %s from a Secret (env valueFrom.secretKeyRef), not %s", EnvName("apps-db"), from)
	}
	ref := r.c.Env[i].ValueFrom.SecretKeyRef
	sec := s.Secret(ref.Name)
	if sec == nil {
		return nil // the references check reports it
	}
	raw, ok := secretData(sec, ref.Key)
	if !ok {
		return nil
	}
	u, err := url.Parse(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("Secret %s key %s is not a URL", sec.Name, ref.Key)
	}
	port := map[string]string{"postgres": "5432", "postgresql": "5432", "mysql": "3306"}[u.Scheme]
	if port == "" {
		return fmt.Errorf("Secret %s key %s: scheme %q, want postgres, postgresql or mysql", sec.Name, ref.Key, u.Scheme)
	}
	if p := u.Port(); p != "" {
		port = p
	}
	if !s.egressAllows(s.policiesSelecting(r.w), port) {
		return fmt.Errorf("no policy lets it reach the database on port %s", port)
	}
	return nil
}

// policiesSelecting lists the NetworkPolicies whose podSelector selects w.
func (s *Set) policiesSelecting(w Workload) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, np := range s.NetworkPolicies {
		ls, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err == nil && ls.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, np)
		}
	}
	return out
}

// redisTLSFiles are the Redis TLS settings that name files.
var redisTLSFiles = []string{"redis-tls-ca", "redis-tls-cert", "redis-tls-key"}

// checkRedisTLS: the binaries read their TLS files at start and exit when
// one is missing, so each must be a key of a mounted Secret (a ConfigMap
// will do for the CA, which is public) in the render.
func checkRedisTLS(s *Set) []error {
	var errs []error
	for _, r := range s.containers(false) {
		if r.binary == "" {
			continue
		}
		cert, _ := s.Setting(r.c, "redis-tls-cert")
		key, _ := s.Setting(r.c, "redis-tls-key")
		if (cert == "") != (key == "") {
			errs = append(errs, fmt.Errorf("%s: HEADCOUNT_REDIS_TLS_CERT and HEADCOUNT_REDIS_TLS_KEY go together", r.id()))
		}
		for _, flag := range redisTLSFiles {
			file, from := s.Setting(r.c, flag)
			if file == "" {
				continue
			}
			vol, k, err := mountedFile(r, file)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %s (%s): %w", r.id(), flag, file, from, err))
				continue
			}
			switch {
			case vol.Secret != nil:
				sec := s.Secret(vol.Secret.SecretName)
				if sec == nil {
					continue // the references check reports it
				}
				if _, ok := secretData(sec, k); !ok {
					errs = append(errs, fmt.Errorf("%s: %s %s (%s): Secret %s has no key %q", r.id(), flag, file, from, sec.Name, k))
				}
			case vol.ConfigMap != nil && flag == "redis-tls-ca":
				if cm := s.ConfigMap(vol.ConfigMap.Name); cm != nil && !hasKey(cm.Data, k) {
					errs = append(errs, fmt.Errorf("%s: %s %s (%s): ConfigMap %s has no key %q", r.id(), flag, file, from, cm.Name, k))
				}
			default:
				errs = append(errs, fmt.Errorf("%s: %s %s (%s): volume %s is not a Secret", r.id(), flag, file, from, vol.Name))
			}
		}
	}
	return errs
}

// checkAppsJSON checks what pkg/apps needs to start: a JSON array of
// apps, each with an id, a key and a secret.
func checkAppsJSON(b []byte) error {
	var list []map[string]any
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("not a JSON array of apps: %w", err)
	}
	if len(list) == 0 {
		return errors.New("no apps")
	}
	for i, a := range list {
		for _, f := range []string{"id", "key", "secret"} {
			if v, _ := a[f].(string); v == "" {
				if _, isNum := a[f].(float64); !isNum {
					return fmt.Errorf("app %d has no %s", i, f)
				}
			}
		}
	}
	return nil
}

var (
	secretName  = regexp.MustCompile(`(?i)secret|passw|token|credential|private|api_?key|app_key`)
	secretValue = regexp.MustCompile(`(?i)"secret"\s*:|://[^/@\s:]*:[^/@\s]+@|-----BEGIN`)
)

func checkConfigMapSecrets(s *Set) []error {
	var errs []error
	for _, cm := range s.ConfigMaps {
		for k, v := range cm.Data {
			if secretName.MatchString(k) {
				errs = append(errs, fmt.Errorf("ConfigMap/%s: key %s looks like a secret; put it in a Secret", cm.Name, k))
			}
			if secretValue.MatchString(v) {
				errs = append(errs, fmt.Errorf("ConfigMap/%s: the value of %s holds a secret (an app secret, a URL password or a key)", cm.Name, k))
			}
		}
		for k := range cm.BinaryData {
			if secretName.MatchString(k) {
				errs = append(errs, fmt.Errorf("ConfigMap/%s: key %s looks like a secret; put it in a Secret", cm.Name, k))
			}
		}
	}
	for _, r := range s.containers(true) {
		for _, e := range r.c.Env {
			// A *_FILE variable names where a secret is mounted, not the secret.
			isPath := strings.HasSuffix(e.Name, "_FILE") && strings.HasPrefix(e.Value, "/")
			if e.ValueFrom == nil && (secretName.MatchString(e.Name) && !isPath || secretValue.MatchString(e.Value)) {
				errs = append(errs, fmt.Errorf("%s: env %s is a literal that looks like a secret; take it from a Secret", r.id(), e.Name))
			}
		}
	}
	return errs
}

func checkCommands(s *Set) []error {
	var errs []error
	for _, w := range s.Workloads() {
		if !isHeadcount(w) {
			continue
		}
		want := w.Template.Labels[nameLabel]
		for i := range w.Template.Spec.Containers {
			c := &w.Template.Spec.Containers[i]
			b := Binary(c)
			switch {
			case b == "":
				errs = append(errs, fmt.Errorf("%s container %s: command %v runs no headcount binary (the image has %s/{wsnode,cleaner,httpapi} and no default for Kubernetes to rely on)", w.ID(), c.Name, c.Command, BinaryDir))
			case c.Command[0] != BinaryDir+"/"+b:
				errs = append(errs, fmt.Errorf("%s container %s: command %s: the image has it at %s/%s", w.ID(), c.Name, c.Command[0], BinaryDir, b))
			case b != want && !w.RunsOnce():
				// A Job's pods run a binary's subcommand under a name of
				// their own (the audit's, cleaner audit).
				errs = append(errs, fmt.Errorf("%s container %s: runs %s, but the pods are labelled %s=%s", w.ID(), c.Name, b, nameLabel, want))
			}
		}
	}
	return errs
}

func checkRedis(s *Set) []error {
	var errs []error
	for _, r := range s.containers(false) {
		if r.binary == "" {
			continue
		}
		if seeds, from := s.Setting(r.c, "redis-cluster"); seeds != "" {
			for _, seed := range RedisSeeds(seeds) {
				if _, err := AddrPort(seed); err != nil {
					errs = append(errs, fmt.Errorf("%s: Redis Cluster seed %q (%s): %w", r.id(), seed, from, err))
				}
			}
			continue
		}
		if sentinels, from := s.Setting(r.c, "redis-sentinel"); sentinels != "" {
			for _, addr := range RedisSeeds(sentinels) {
				if _, err := AddrPort(addr); err != nil {
					errs = append(errs, fmt.Errorf("%s: Redis Sentinel address %q (%s): %w", r.id(), addr, from, err))
				}
			}
			continue
		}
		raw, from := s.Setting(r.c, "redis")
		if raw == "" {
			errs = append(errs, fmt.Errorf("%s: neither HEADCOUNT_REDIS nor HEADCOUNT_REDIS_CLUSTER is set: the default 127.0.0.1:6379 is the pod itself", r.id()))
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			errs = append(errs, fmt.Errorf("%s: HEADCOUNT_REDIS %q (%s) is not a redis:// URL", r.id(), raw, from))
			continue
		}
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = "6379"
		}
		svcName, inCluster := serviceHost(host)
		if !inCluster {
			continue // outside the cluster: nothing here to check it against
		}
		svc := s.Service(svcName)
		if svc == nil {
			errs = append(errs, fmt.Errorf("%s: Redis host %s (%s) is no Service of the render", r.id(), host, from))
			continue
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port }) {
			errs = append(errs, fmt.Errorf("%s: Redis URL port %s (%s) is not a port of Service/%s", r.id(), port, from, svc.Name))
		}
	}
	return errs
}

// serviceHost says whether host names an in-cluster Service of this
// namespace (svc, svc.ns, svc.ns.svc, svc.ns.svc.cluster.local).
func serviceHost(host string) (string, bool) {
	if host == "localhost" || strings.HasPrefix(host, "127.") {
		return "", false
	}
	parts := strings.Split(host, ".")
	switch {
	case len(parts) == 1:
		return host, true
	case len(parts) == 2, len(parts) >= 3 && parts[2] == "svc":
		return parts[0], true
	}
	return "", false
}

func checkSpread(s *Set) []error {
	var errs []error
	for _, w := range s.Workloads() {
		if !isHeadcount(w) || w.RunsOnce() {
			continue
		}
		keys := map[string]bool{}
		for _, tsc := range w.Template.Spec.TopologySpreadConstraints {
			keys[tsc.TopologyKey] = true
			if err := spreadSchedules(tsc); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w.ID(), err))
			}
			ls, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
			if err != nil || tsc.LabelSelector == nil || !ls.Matches(labels.Set(w.Template.Labels)) {
				errs = append(errs, fmt.Errorf("%s: spread over %s counts pods its labelSelector %v does not match, not its own", w.ID(), tsc.TopologyKey, tsc.LabelSelector))
			}
		}
		for _, k := range []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"} {
			if !keys[k] {
				errs = append(errs, fmt.Errorf("%s: no topologySpreadConstraint over %s", w.ID(), k))
			}
		}
	}
	return errs
}

// spreadSchedules refuses a hard spread that counts nodes the pod may not
// run on. Cordoned, tainted or outside its node affinity, such a node is an
// empty domain: the skew to it is already at its bound, so a pod (an
// evicted one behind its disruption budget too) stays Pending.
func spreadSchedules(tsc corev1.TopologySpreadConstraint) error {
	if tsc.WhenUnsatisfiable != corev1.DoNotSchedule {
		return nil
	}
	if tsc.NodeTaintsPolicy == nil || *tsc.NodeTaintsPolicy != corev1.NodeInclusionPolicyHonor {
		return fmt.Errorf("spread over %s is DoNotSchedule but counts cordoned and tainted nodes as empty domains (nodeTaintsPolicy is not Honor): a drain can stall", tsc.TopologyKey)
	}
	if tsc.NodeAffinityPolicy != nil && *tsc.NodeAffinityPolicy != corev1.NodeInclusionPolicyHonor {
		return fmt.Errorf("spread over %s is DoNotSchedule but counts nodes outside the pod's node affinity (nodeAffinityPolicy is not Honor)", tsc.TopologyKey)
	}
	return nil
}

func checkServiceMonitors(s *Set) []error {
	var errs []error
	for _, sm := range s.ServiceMonitors {
		ls, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			errs = append(errs, fmt.Errorf("ServiceMonitor/%s: selector: %w", sm.Name, err))
			continue
		}
		var svcs []*corev1.Service
		for _, svc := range s.Services {
			if !ls.Empty() && ls.Matches(labels.Set(svc.Labels)) {
				svcs = append(svcs, svc)
			}
		}
		if len(svcs) == 0 {
			errs = append(errs, fmt.Errorf("ServiceMonitor/%s: selector %s selects no Service", sm.Name, ls))
		}
		if len(sm.Spec.Endpoints) == 0 {
			errs = append(errs, fmt.Errorf("ServiceMonitor/%s: no endpoints", sm.Name))
		}
		for _, ep := range sm.Spec.Endpoints {
			if ep.Path != "" && ep.Path != "/metrics" {
				errs = append(errs, fmt.Errorf("ServiceMonitor/%s: path %s; the binaries serve /metrics", sm.Name, ep.Path))
			}
			for _, svc := range svcs {
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					errs = append(errs, fmt.Errorf("ServiceMonitor/%s: port %q is not a port of Service/%s", sm.Name, ep.Port, svc.Name))
				}
			}
		}
	}
	return errs
}
