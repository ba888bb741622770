package validate

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Set is one rendered target, decoded.
type Set struct {
	// Target names what was rendered.
	Target  string
	Objects []*Object

	Namespaces      []*corev1.Namespace
	ConfigMaps      []*corev1.ConfigMap
	Secrets         []*corev1.Secret
	Services        []*corev1.Service
	Deployments     []*appsv1.Deployment
	StatefulSets    []*appsv1.StatefulSet
	CronJobs        []*batchv1.CronJob
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	PDBs            []*policyv1.PodDisruptionBudget
	NetworkPolicies []*networkingv1.NetworkPolicy
	ServiceMonitors []*ServiceMonitor
	PrometheusRules []*PrometheusRule
	Ingresses       []*networkingv1.Ingress
	HTTPRoutes      []*HTTPRoute
}

// DecodeSet decodes rendered documents strictly; every failure is reported.
func DecodeSet(target string, docs [][]byte) (*Set, error) {
	s := &Set{Target: target}
	var errs []error
	for i, d := range docs {
		o, err := DecodeObject(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("object %d: %w", i, err))
			continue
		}
		s.Add(o)
	}
	return s, errors.Join(errs...)
}

// Add files a decoded object under its kind.
func (s *Set) Add(o *Object) {
	s.Objects = append(s.Objects, o)
	switch t := o.Typed.(type) {
	case *corev1.Namespace:
		s.Namespaces = append(s.Namespaces, t)
	case *corev1.ConfigMap:
		s.ConfigMaps = append(s.ConfigMaps, t)
	case *corev1.Secret:
		s.Secrets = append(s.Secrets, t)
	case *corev1.Service:
		s.Services = append(s.Services, t)
	case *appsv1.Deployment:
		s.Deployments = append(s.Deployments, t)
	case *appsv1.StatefulSet:
		s.StatefulSets = append(s.StatefulSets, t)
	case *batchv1.CronJob:
		s.CronJobs = append(s.CronJobs, t)
	case *autoscalingv2.HorizontalPodAutoscaler:
		s.HPAs = append(s.HPAs, t)
	case *policyv1.PodDisruptionBudget:
		s.PDBs = append(s.PDBs, t)
	case *networkingv1.NetworkPolicy:
		s.NetworkPolicies = append(s.NetworkPolicies, t)
	case *ServiceMonitor:
		s.ServiceMonitors = append(s.ServiceMonitors, t)
	case *PrometheusRule:
		s.PrometheusRules = append(s.PrometheusRules, t)
	case *networkingv1.Ingress:
		s.Ingresses = append(s.Ingresses, t)
	case *HTTPRoute:
		s.HTTPRoutes = append(s.HTTPRoutes, t)
	}
}

// Workload is a Deployment, a StatefulSet or a CronJob: what the checks
// need of each.
type Workload struct {
	Kind, Name string
	// Selector is nil for a CronJob: the Job controller selects its pods
	// by its own uid.
	Selector *metav1.LabelSelector
	Template *corev1.PodTemplateSpec
	// Replicas is nil when the manifest leaves it to the API server (1) or
	// an HPA.
	Replicas *int32
}

// ID names the workload in messages.
func (w Workload) ID() string { return w.Kind + "/" + w.Name }

// RunsOnce says whether the workload's pods run to their end (a CronJob's):
// such a pod serves no port, so it needs no probe, metrics port,
// disruption budget or spread.
func (w Workload) RunsOnce() bool { return w.Kind == "CronJob" }

// Workloads lists every Deployment, StatefulSet and CronJob.
func (s *Set) Workloads() []Workload {
	var out []Workload
	for _, d := range s.Deployments {
		out = append(out, Workload{Kind: "Deployment", Name: d.Name, Selector: d.Spec.Selector, Template: &d.Spec.Template, Replicas: d.Spec.Replicas})
	}
	for _, st := range s.StatefulSets {
		out = append(out, Workload{Kind: "StatefulSet", Name: st.Name, Selector: st.Spec.Selector, Template: &st.Spec.Template, Replicas: st.Spec.Replicas})
	}
	for _, cj := range s.CronJobs {
		out = append(out, Workload{Kind: "CronJob", Name: cj.Name, Template: &cj.Spec.JobTemplate.Spec.Template})
	}
	return out
}

// Binaries are the headcount commands and the defaults of the flags the
// checks read (pkg/config): admin-addr, addr, drain.
var Binaries = map[string]map[string]string{
	"wsnode":  {"admin-addr": ":9601", "addr": ":6001", "drain": "10s"},
	"cleaner": {"admin-addr": ":9602"},
	"httpapi": {"admin-addr": ":9603", "addr": ":8080"},
}

// BinaryDir is where the image puts the binaries (deploy/image).
const BinaryDir = "/usr/local/bin"

// Binary returns the headcount binary a container runs, or "".
func Binary(c *corev1.Container) string {
	if len(c.Command) == 0 {
		return ""
	}
	if b := path.Base(c.Command[0]); Binaries[b] != nil {
		return b
	}
	return ""
}

// Setting returns a headcount flag's effective value for a container, as
// the binary would see it: the flag in command/args wins, then the
// environment variable HEADCOUNT_<FLAG> (env over envFrom, later envFrom
// sources over earlier ones), then the binary's default. from says which.
func (s *Set) Setting(c *corev1.Container, flag string) (value, from string) {
	argv := append(append([]string{}, c.Command[min(1, len(c.Command)):]...), c.Args...)
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		for _, p := range []string{"--" + flag, "-" + flag} {
			if a == p && i+1 < len(argv) {
				value, from = argv[i+1], "flag "+p
			} else if v, ok := strings.CutPrefix(a, p+"="); ok {
				value, from = v, "flag "+p
			}
		}
	}
	if from != "" {
		return value, from
	}
	env := EnvName(flag)
	if v, ok := s.Env(c)[env]; ok && v != "" {
		return v, "env " + env
	}
	if b := Binary(c); b != "" {
		if d, ok := Binaries[b][flag]; ok {
			return d, "default"
		}
	}
	return "", ""
}

// EnvName is pkg/config's variable for a flag.
func EnvName(flag string) string {
	return "HEADCOUNT_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Env is the environment a container starts with, as far as the render
// tells: envFrom ConfigMaps (later ones win), then env literals. Values
// from Secrets or the downward API appear as "<valueFrom>".
func (s *Set) Env(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if cm := s.ConfigMap(ef.ConfigMapRef.Name); cm != nil {
				for k, v := range cm.Data {
					out[ef.Prefix+k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			out[e.Name] = "<valueFrom>"
		} else {
			out[e.Name] = e.Value
		}
	}
	return out
}

// ConfigMap returns the named ConfigMap, or nil.
func (s *Set) ConfigMap(name string) *corev1.ConfigMap {
	for _, cm := range s.ConfigMaps {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

// Secret returns the named Secret, or nil.
func (s *Set) Secret(name string) *corev1.Secret {
	for _, sec := range s.Secrets {
		if sec.Name == name {
			return sec
		}
	}
	return nil
}

// Service returns the named Service, or nil.
func (s *Set) Service(name string) *corev1.Service {
	for _, svc := range s.Services {
		if svc.Name == name {
			return svc
		}
	}
	return nil
}

// Deployment returns the named Deployment, or nil.
func (s *Set) Deployment(name string) *appsv1.Deployment {
	for _, d := range s.Deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Selected returns the workloads whose pods sel selects. A nil selector
// selects nothing (as in a PDB); an empty one selects everything.
func (s *Set) Selected(sel *metav1.LabelSelector) ([]Workload, error) {
	if sel == nil {
		return nil, nil
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, err
	}
	var out []Workload
	for _, w := range s.Workloads() {
		if ls.Matches(labels.Set(w.Template.Labels)) {
			out = append(out, w)
		}
	}
	return out, nil
}

// SelectedByMap is Selected for a Service's map selector: an empty map
// selects nothing (such a Service has manual endpoints).
func (s *Set) SelectedByMap(sel map[string]string) []Workload {
	if len(sel) == 0 {
		return nil
	}
	var out []Workload
	for _, w := range s.Workloads() {
		if labels.SelectorFromSet(sel).Matches(labels.Set(w.Template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

// ContainerPort finds a container port by name or number.
func ContainerPort(spec *corev1.PodSpec, nameOrNumber string) (*corev1.ContainerPort, *corev1.Container) {
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for j := range c.Ports {
			p := &c.Ports[j]
			if p.Name == nameOrNumber || fmt.Sprint(p.ContainerPort) == nameOrNumber {
				return p, c
			}
		}
	}
	return nil, nil
}

// RedisSeeds returns the host:port addresses of a --redis-cluster or
// --redis-sentinel value: comma-separated host:port, or the Cluster's URL
// form redis[s]://[user:password@]host[:port]?addr=host:port&... (port
// 6379 when the URL's host has none).
func RedisSeeds(v string) []string {
	if !strings.Contains(v, "://") {
		var out []string
		for _, a := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(a))
		}
		return out
	}
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil {
		return []string{"(an unparsable URL)"}
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "6379")
	}
	return append([]string{host}, u.Query()["addr"]...)
}

// AddrPort returns the port of a host:port listen address.
func AddrPort(addr string) (string, error) {
	_, port, err := net.SplitHostPort(addr)
	return port, err
}
