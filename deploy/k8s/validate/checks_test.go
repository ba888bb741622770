package validate

import (
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	single    = "overlays/single-redis"
	cluster   = "overlays/redis-cluster"
	monitored = "overlays/redis-cluster+components/servicemonitor"
	ingressed = "overlays/redis-cluster+components/ingress"
)

var (
	renderOnce sync.Once
	rendered   map[string][][]byte
	renderErr  error
)

// docs renders every target once per test binary; each test decodes its
// own copy, so mutations never leak between tests.
func docs(t *testing.T, target string) [][]byte {
	t.Helper()
	if strings.HasPrefix(target, "helm ") {
		return chartDocs(t, target)
	}
	renderOnce.Do(func() {
		tree, err := LoadTree("..")
		if err != nil {
			renderErr = err
			return
		}
		targets, err := tree.Targets()
		if err != nil {
			renderErr = err
			return
		}
		rendered = map[string][][]byte{}
		for _, tg := range targets {
			d, err := tree.Render(tg)
			if err != nil {
				renderErr = err
				return
			}
			rendered[tg.Name] = d
		}
	})
	if renderErr != nil {
		t.Fatal(renderErr)
	}
	d, ok := rendered[target]
	if !ok {
		t.Fatalf("no target %s", target)
	}
	return d
}

func load(t *testing.T, target string) *Set {
	t.Helper()
	s, err := DecodeSet(target, docs(t, target))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEveryTargetPasses(t *testing.T) {
	for _, target := range []string{single, cluster, monitored} {
		t.Run(target, func(t *testing.T) {
			s := load(t, target)
			for _, err := range s.Check() {
				t.Error(err)
			}
		})
	}
}

// TestStrictDecode shows that the decoder refuses what a lenient one
// would drop or coerce in silence.
func TestStrictDecode(t *testing.T) {
	var wsnode []byte
	for _, d := range docs(t, cluster) {
		if o, err := DecodeObject(d); err == nil && o.Kind == "Deployment" && o.Name == "wsnode" {
			wsnode = d
		}
	}
	if wsnode == nil {
		t.Fatal("no wsnode Deployment in the render")
	}
	if _, err := DecodeObject(wsnode); err != nil {
		t.Fatalf("the real document fails: %v", err)
	}
	cases := []struct{ name, old, new, want string }{
		{"unknown field", "      terminationGracePeriodSeconds: 60", "      terminationGracePeriodSeconds: 60\n      terminationGracePeriod: 60", `unknown field "spec.template.spec.terminationGracePeriod"`},
		{"field in the wrong case", "      terminationGracePeriodSeconds: 60", "      TerminationGracePeriodSeconds: 60", `unknown field "spec.template.spec.TerminationGracePeriodSeconds"`},
		{"misplaced field", "  revisionHistoryLimit: 5", "  revisionHistoryLimit: 5\n  terminationGracePeriodSeconds: 60", `unknown field "spec.terminationGracePeriodSeconds"`},
		{"type error", "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: sixty", "cannot unmarshal string"},
		{"bad quantity", "memory: 2Gi", "memory: 2 gigs", "quantities must match"},
		{"duplicate field", "  revisionHistoryLimit: 5", "  revisionHistoryLimit: 5\n  revisionHistoryLimit: 6", "revisionHistoryLimit"},
		{"unknown kind", "apiVersion: apps/v1", "apiVersion: apps/v1beta2", "not a kind deploy/k8s or the chart may hold"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(string(wsnode), c.old, c.new, 1)
			if doc == string(wsnode) {
				t.Fatalf("%q is not in the document", c.old)
			}
			_, err := DecodeObject([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// Helpers to reach into a decoded Set.

// deploy finds a Deployment by its kustomize name: the chart's carry
// chartPrefix.
func deploy(t *testing.T, s *Set, name string) *appsv1.Deployment {
	t.Helper()
	if d := s.Deployment(name); d != nil {
		return d
	}
	if d := s.Deployment(chartPrefix + name); d != nil {
		return d
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

func ctr(t *testing.T, s *Set, name string) *corev1.Container {
	t.Helper()
	return &deploy(t, s, name).Spec.Template.Spec.Containers[0]
}

func configMap(t *testing.T, s *Set, prefix string) *corev1.ConfigMap {
	t.Helper()
	for _, cm := range s.ConfigMaps {
		// The chart's names are plain; kustomize's carry a hash.
		if cm.Name == prefix || strings.HasPrefix(cm.Name, prefix+"-") {
			return cm
		}
	}
	t.Fatalf("no ConfigMap %s-*", prefix)
	return nil
}

func netpol(t *testing.T, s *Set, name string) *networkingv1.NetworkPolicy {
	t.Helper()
	for _, np := range s.NetworkPolicies {
		if np.Name == name {
			return np
		}
	}
	t.Fatalf("no NetworkPolicy %s", name)
	return nil
}

// without rebuilds s without one object.
func without(s *Set, kind, name string) *Set {
	out := &Set{Target: s.Target}
	for _, o := range s.Objects {
		if o.Kind != kind || o.Name != name {
			out.Add(o)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func setEnv(c *corev1.Container, name, value string) {
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

// TestChecksCatch breaks the rendered manifests in memory, one way at a
// time, and requires the named check to say so.
func TestChecksCatch(t *testing.T) {
	cases := []struct {
		name, target, check, want string
		// mutate breaks s; it may return a replacement Set.
		mutate func(t *testing.T, s *Set) *Set
	}{
		// namespace
		{"object outside the namespace", cluster, "namespace", `Service/httpapi is in namespace "default"`, func(t *testing.T, s *Set) *Set {
			s.Service("httpapi").Namespace = "default"
			return s
		}},
		// references
		{"envFrom a ConfigMap that is not rendered", cluster, "references", `envFrom ConfigMap "wsnode-conf"`, func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").EnvFrom[1].ConfigMapRef.Name = "wsnode-conf"
			return s
		}},
		{"missing ServiceAccount", cluster, "references", `ServiceAccount "headcount"`, func(t *testing.T, s *Set) *Set {
			return without(s, "ServiceAccount", "headcount")
		}},
		// selectors
		{"Deployment selector misses its pods", cluster, "selectors", "does not match its pod labels", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "wsnode").Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "ws-node"
			return s
		}},
		{"Deployment selector takes another's pods", cluster, "selectors", "also matches the pods of Deployment/wsnode", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "cleaner").Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "headcount"}}
			return s
		}},
		{"StatefulSet serviceName unknown", single, "selectors", `serviceName "redis-headless"`, func(t *testing.T, s *Set) *Set {
			s.StatefulSets[0].Spec.ServiceName = "redis-headless"
			return s
		}},
		// services
		{"Service selects nothing", cluster, "services", "Service/wsnode: selector", func(t *testing.T, s *Set) *Set {
			s.Service("wsnode").Spec.Selector["app.kubernetes.io/name"] = "wsnodes"
			return s
		}},
		{"Service target port missing", cluster, "services", "target port web is not a container port of Deployment/httpapi", func(t *testing.T, s *Set) *Set {
			s.Service("httpapi").Spec.Ports[0].TargetPort = intstr.FromString("web")
			return s
		}},
		{"metrics Service reaches a pod without a metrics port", single, "services", "target port metrics is not a container port of StatefulSet/redis", func(t *testing.T, s *Set) *Set {
			s.StatefulSets[0].Spec.Template.Labels["app.kubernetes.io/part-of"] = "headcount"
			return s
		}},
		{"session affinity on wsnode", cluster, "services", "session affinity is not needed", func(t *testing.T, s *Set) *Set {
			s.Service("wsnode").Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			return s
		}},
		// hpa
		{"HPA targets a missing Deployment", cluster, "hpa", `Deployment "ws-node" is not in the render`, func(t *testing.T, s *Set) *Set {
			s.HPAs[0].Spec.ScaleTargetRef.Name = "ws-node"
			return s
		}},
		{"HPA target sets replicas", cluster, "hpa", "Deployment/wsnode sets replicas", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "wsnode").Spec.Replicas = ptr(int32(3))
			return s
		}},
		{"HPA on CPU without a CPU request", cluster, "hpa", "scales on cpu but container httpapi", func(t *testing.T, s *Set) *Set {
			delete(ctr(t, s, "httpapi").Resources.Requests, corev1.ResourceCPU)
			return s
		}},
		{"HPA without a CPU metric", cluster, "hpa", "no CPU resource metric", func(t *testing.T, s *Set) *Set {
			for _, h := range s.HPAs {
				if h.Name == "httpapi" {
					h.Spec.Metrics = nil
				}
			}
			return s
		}},
		// availability
		{"PDB selects nothing", cluster, "availability", "PodDisruptionBudget/wsnode: selects no pods", func(t *testing.T, s *Set) *Set {
			s.PDBs[0].Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "websocket"
			return s
		}},
		{"PDB blocks every drain", cluster, "availability", "minAvailable 2 of 2 pods of Deployment/cleaner allows no eviction", func(t *testing.T, s *Set) *Set {
			for _, p := range s.PDBs {
				if p.Name == "cleaner" {
					p.Spec.MinAvailable = ptr(intstr.FromInt32(2))
				}
			}
			return s
		}},
		{"one cleaner", cluster, "availability", "active/passive needs 2", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "cleaner").Spec.Replicas = ptr(int32(1))
			return s
		}},
		{"workload without a PDB", cluster, "availability", "Deployment/httpapi: no PodDisruptionBudget", func(t *testing.T, s *Set) *Set {
			return without(s, "PodDisruptionBudget", "httpapi")
		}},
		// probes
		{"readiness on a path the binary does not serve", cluster, "probes", `readiness probe gets "/ready", want /readyz`, func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").ReadinessProbe.HTTPGet.Path = "/ready"
			return s
		}},
		{"liveness probe on the readiness path", cluster, "probes", `liveness probe gets "/readyz", want /healthz`, func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").LivenessProbe.HTTPGet.Path = "/readyz"
			return s
		}},
		{"probe on a port name that does not exist", cluster, "probes", `readiness probe port "admin" is not a port`, func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").ReadinessProbe.HTTPGet.Port = intstr.FromString("admin")
			return s
		}},
		{"admin listener moved, probes did not", cluster, "probes", "readiness probe port metrics is 9601, but the admin listener is on 9700 (env HEADCOUNT_ADMIN_ADDR)", func(t *testing.T, s *Set) *Set {
			setEnv(ctr(t, s, "wsnode"), "HEADCOUNT_ADMIN_ADDR", ":9700")
			return s
		}},
		{"no liveness probe", cluster, "probes", "needs an httpGet liveness probe on /healthz", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "httpapi").LivenessProbe = nil
			return s
		}},
		// ports
		{"WebSocket port moved by a flag", cluster, "ports", "listens on :7000 (flag --addr) but declares no container port 7000", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").Args = []string{"--addr=:7000"}
			return s
		}},
		{"metrics port renamed", cluster, "ports", "needs a container port named metrics", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").Ports[0].Name = "admin"
			return s
		}},
		// grace
		{"grace period shorter than the drain", cluster, "grace", "terminationGracePeriodSeconds 40s must exceed preStop 5s + drain 30s (env HEADCOUNT_DRAIN) + shutdown tail 13s = 48s", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "wsnode").Spec.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(40))
			return s
		}},
		{"drain raised in the ConfigMap", cluster, "grace", "drain 1m0s (env HEADCOUNT_DRAIN)", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "wsnode-config").Data["HEADCOUNT_DRAIN"] = "60s"
			return s
		}},
		{"drain flag wins over the environment", cluster, "grace", "drain 1m30s (flag --drain)", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").Args = []string{"--drain", "90s"}
			return s
		}},
		{"preStop exec in a shell-less image", cluster, "grace", "preStop exec [sh -c sleep 5] cannot run", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "httpapi").Lifecycle.PreStop = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "sleep 5"}}}
			return s
		}},
		// resources
		{"no limits", cluster, "resources", "container cleaner: no memory limit", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").Resources.Limits = nil
			return s
		}},
		{"request above limit", cluster, "resources", "cpu request 4 above its limit 2", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4")
			return s
		}},
		{"GOMEMLIMIT above the memory limit", cluster, "resources", "GOMEMLIMIT 3GiB is not below the memory limit 2Gi", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").Env[0].Value = "3GiB"
			return s
		}},
		{"Redis without limits", single, "resources", "StatefulSet/redis container redis: no cpu limit", func(t *testing.T, s *Set) *Set {
			delete(s.StatefulSets[0].Spec.Template.Spec.Containers[0].Resources.Limits, corev1.ResourceCPU)
			return s
		}},
		// security
		{"may run as root", cluster, "security", "runAsNonRoot is not true", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").SecurityContext.RunAsNonRoot = nil
			deploy(t, s, "wsnode").Spec.Template.Spec.SecurityContext.RunAsNonRoot = nil
			return s
		}},
		{"uid 0", cluster, "security", "runs as uid 0", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").SecurityContext.RunAsUser = ptr(int64(0))
			return s
		}},
		{"writable root filesystem", cluster, "security", "readOnlyRootFilesystem is not true", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "httpapi").SecurityContext.ReadOnlyRootFilesystem = ptr(false)
			return s
		}},
		{"privilege escalation left on", cluster, "security", "allowPrivilegeEscalation is not false", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").SecurityContext.AllowPrivilegeEscalation = nil
			return s
		}},
		{"capabilities kept", cluster, "security", "capabilities do not drop ALL", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
			return s
		}},
		{"capability added", cluster, "security", "adds capabilities [NET_BIND_SERVICE]", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
			return s
		}},
		{"no seccomp profile", cluster, "security", "no RuntimeDefault (or Localhost) seccomp profile", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").SecurityContext.SeccompProfile = nil
			deploy(t, s, "wsnode").Spec.Template.Spec.SecurityContext.SeccompProfile = nil
			return s
		}},
		{"host network", cluster, "security", "shares a host namespace", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "wsnode").Spec.Template.Spec.HostNetwork = true
			return s
		}},
		{"service account token mounted", cluster, "security", "mounts a service account token", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "cleaner").Spec.Template.Spec.AutomountServiceAccountToken = nil
			return s
		}},
		{"Redis without a securityContext", single, "security", "StatefulSet/redis container redis: no securityContext", func(t *testing.T, s *Set) *Set {
			s.StatefulSets[0].Spec.Template.Spec.Containers[0].SecurityContext = nil
			return s
		}},
		// apps-secret
		{"apps Secret not mounted", cluster, "apps-secret", "no volume mount provides it", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").VolumeMounts = nil
			return s
		}},
		{"apps file from a ConfigMap", cluster, "apps-secret", "volume apps is not a Secret", func(t *testing.T, s *Set) *Set {
			spec := &deploy(t, s, "httpapi").Spec.Template.Spec
			spec.Volumes[0].VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "apps"}}}
			return s
		}},
		{"apps Secret without the file", cluster, "apps-secret", `has no key "apps.json"`, func(t *testing.T, s *Set) *Set {
			sec := s.Secrets[0]
			sec.Data["apps.yaml"] = sec.Data["apps.json"]
			delete(sec.Data, "apps.json")
			return s
		}},
		{"apps file not an apps array", cluster, "apps-secret", "app 0 has no secret", func(t *testing.T, s *Set) *Set {
			s.Secrets[0].Data["apps.json"] = []byte(`[{"id": "a", "key": "k"}]`)
			return s
		}},
		{"apps file mounted with subPath", cluster, "apps-secret", "the kubelet never updates a subPath mount", func(t *testing.T, s *Set) *Set {
			c := ctr(t, s, "wsnode")
			c.VolumeMounts[0].MountPath, c.VolumeMounts[0].SubPath = "/etc/headcount/apps.json", "apps.json"
			return s
		}},
		{"no apps file at all", cluster, "apps-secret", "no apps file (HEADCOUNT_APPS_FILE)", func(t *testing.T, s *Set) *Set {
			delete(configMap(t, s, "headcount-config").Data, "HEADCOUNT_APPS_FILE")
			return s
		}},
		{"app secret in the environment", cluster, "apps-secret", "HEADCOUNT_APP_SECRET is set", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").Env = append(ctr(t, s, "cleaner").Env, corev1.EnvVar{Name: "HEADCOUNT_APP_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "x"}}})
			return s
		}},
		{"apps database URL as a literal", chartAppsDB, "apps-secret", "take HEADCOUNT_APPS_DB from a Secret", func(t *testing.T, s *Set) *Set {
			c := ctr(t, s, "httpapi")
			for i := range c.Env {
				if c.Env[i].Name == "HEADCOUNT_APPS_DB" {
					c.Env[i] = corev1.EnvVar{Name: "HEADCOUNT_APPS_DB", Value: "postgres://db.example.com:5432/soketi"}
				}
			}
			return s
		}},
		{"apps database out of reach", chartAppsDB, "apps-secret", "no policy lets it reach the database on port 5432", func(t *testing.T, s *Set) *Set {
			return without(s, "NetworkPolicy", "headcount-apps-db-egress")
		}},
		{"apps database on another port", chartAppsDB, "apps-secret", "on port 6432", func(t *testing.T, s *Set) *Set {
			s.Secret("headcount-apps-db").StringData["url"] = "postgres://headcount:pw@pgbouncer.example.com:6432/soketi"
			return s
		}},
		{"apps database not SQL", chartAppsDB, "apps-secret", `scheme "redis", want postgres, postgresql or mysql`, func(t *testing.T, s *Set) *Set {
			s.Secret("headcount-apps-db").StringData["url"] = "redis://db.example.com:6379/0"
			return s
		}},
		{"apps file and database both", chartAppsDB, "apps-secret", "the binaries refuse the two together", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_APPS_FILE"] = "/etc/headcount/apps.json"
			return s
		}},
		// redis-tls
		{"TLS key not in its Secret", chartSentinel, "redis-tls", `Secret headcount-redis-tls has no key "tls.key"`, func(t *testing.T, s *Set) *Set {
			delete(s.Secret("headcount-redis-tls").StringData, "tls.key")
			return s
		}},
		{"TLS files not mounted", chartSentinel, "redis-tls", "redis-tls-ca /etc/headcount-redis-tls/ca.crt (env HEADCOUNT_REDIS_TLS_CA): no volume mount provides it", func(t *testing.T, s *Set) *Set {
			c := ctr(t, s, "cleaner")
			c.VolumeMounts = c.VolumeMounts[:1]
			return s
		}},
		{"TLS files from an emptyDir", chartSentinel, "redis-tls", "volume redis-tls is not a Secret", func(t *testing.T, s *Set) *Set {
			spec := &deploy(t, s, "wsnode").Spec.Template.Spec
			spec.Volumes[1].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
			return s
		}},
		{"client certificate without its key", chartSentinel, "redis-tls", "HEADCOUNT_REDIS_TLS_CERT and HEADCOUNT_REDIS_TLS_KEY go together", func(t *testing.T, s *Set) *Set {
			delete(configMap(t, s, "headcount-config").Data, "HEADCOUNT_REDIS_TLS_KEY")
			return s
		}},
		// configmap-secrets
		{"secret-looking key", cluster, "configmap-secrets", "key HEADCOUNT_APP_SECRET looks like a secret", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_APP_SECRET"] = "s3cret"
			return s
		}},
		{"password in the Redis URL", single, "configmap-secrets", "the value of HEADCOUNT_REDIS holds a secret", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_REDIS"] = "redis://default:hunter2@redis:6379/0"
			return s
		}},
		{"apps file in a ConfigMap", cluster, "configmap-secrets", "the value of apps.json holds a secret", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["apps.json"] = `[{"id": "a", "key": "k", "secret": "s"}]`
			return s
		}},
		{"literal secret env", cluster, "configmap-secrets", "env REDIS_PASSWORD is a literal", func(t *testing.T, s *Set) *Set {
			setEnv(ctr(t, s, "httpapi"), "REDIS_PASSWORD", "hunter2")
			return s
		}},
		// commands
		{"Deployment runs another binary", cluster, "commands", "runs httpapi, but the pods are labelled app.kubernetes.io/name=wsnode", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "wsnode").Command = []string{"/usr/local/bin/httpapi"}
			return s
		}},
		{"binary at a path the image does not have", cluster, "commands", "command /bin/cleaner: the image has it at /usr/local/bin/cleaner", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").Command = []string{"/bin/cleaner"}
			return s
		}},
		{"no command", cluster, "commands", "runs no headcount binary", func(t *testing.T, s *Set) *Set {
			ctr(t, s, "cleaner").Command = nil
			return s
		}},
		// redis
		{"Redis not configured", cluster, "redis", "neither HEADCOUNT_REDIS nor HEADCOUNT_REDIS_CLUSTER", func(t *testing.T, s *Set) *Set {
			delete(configMap(t, s, "headcount-config").Data, "HEADCOUNT_REDIS_CLUSTER")
			return s
		}},
		{"Redis URL names no Service", single, "redis", "Redis host redis-master (env HEADCOUNT_REDIS) is no Service", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_REDIS"] = "redis://redis-master:6379/0"
			return s
		}},
		{"Redis URL on the wrong port", single, "redis", "port 6380 (env HEADCOUNT_REDIS) is not a port of Service/redis", func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_REDIS"] = "redis://redis.headcount.svc:6380/0"
			return s
		}},
		{"cluster seed without a port", cluster, "redis", `Redis Cluster seed "redis-0"`, func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_REDIS_CLUSTER"] = "redis-0,redis-1:6379"
			return s
		}},
		{"cluster URL seed without a port", cluster, "redis", `Redis Cluster seed "redis-1"`, func(t *testing.T, s *Set) *Set {
			configMap(t, s, "headcount-config").Data["HEADCOUNT_REDIS_CLUSTER"] = "rediss://redis-0:6379?addr=redis-1"
			return s
		}},
		{"sentinel without a port", cluster, "redis", `Redis Sentinel address "sentinel-1"`, func(t *testing.T, s *Set) *Set {
			delete(configMap(t, s, "headcount-config").Data, "HEADCOUNT_REDIS_CLUSTER")
			configMap(t, s, "headcount-config").Data["HEADCOUNT_REDIS_SENTINEL"] = "sentinel-0:26379,sentinel-1"
			return s
		}},
		// networkpolicy
		{"no default deny", cluster, "networkpolicy", "no default-deny policy", func(t *testing.T, s *Set) *Set {
			return without(s, "NetworkPolicy", "default-deny")
		}},
		{"a policy over the whole namespace", cluster, "networkpolicy", "NetworkPolicy/default-deny: podSelector {} selects every pod of the namespace", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "default-deny").Spec.PodSelector = metav1.LabelSelector{}
			return s
		}},
		{"Redis isolated for ingress only", single, "networkpolicy", "StatefulSet/redis: no policy isolates it both ways", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "redis-ingress").Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
			return s
		}},
		{"no DNS egress", cluster, "networkpolicy", "Deployment/wsnode: no policy lets it reach DNS", func(t *testing.T, s *Set) *Set {
			return without(s, "NetworkPolicy", "allow-dns")
		}},
		{"cleaner reachable from outside", cluster, "networkpolicy", "lets anyone reach Deployment/cleaner", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "wsnode-ingress").Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "headcount"}}
			netpol(t, s, "wsnode-ingress").Spec.Ingress[0].Ports[0].Port = ptr(intstr.FromString("metrics"))
			return s
		}},
		{"admin port open to everyone", cluster, "networkpolicy", "opens port metrics of Deployment/wsnode to everyone", func(t *testing.T, s *Set) *Set {
			rule := &netpol(t, s, "wsnode-ingress").Spec.Ingress[0]
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Port: ptr(intstr.FromString("metrics"))})
			return s
		}},
		{"every port open", cluster, "networkpolicy", "opens every port to everyone", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "httpapi-ingress").Spec.Ingress[0].Ports = nil
			return s
		}},
		{"an ipBlock of every address counts as open", cluster, "networkpolicy", "lets anyone reach Deployment/cleaner", func(t *testing.T, s *Set) *Set {
			np := netpol(t, s, "metrics-ingress")
			np.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}
			return s
		}},
		{"Redis open to every pod", single, "networkpolicy", "lets anyone reach StatefulSet/redis", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "redis-ingress").Spec.Ingress[0].From = nil
			return s
		}},
		{"Redis open to another namespace", single, "networkpolicy", "lets other namespaces or addresses reach StatefulSet/redis", func(t *testing.T, s *Set) *Set {
			rule := &netpol(t, s, "redis-ingress").Spec.Ingress[0]
			rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}})
			return s
		}},
		{"no egress to Redis", cluster, "networkpolicy", "Deployment/wsnode: no policy lets it reach Redis on port 6379", func(t *testing.T, s *Set) *Set {
			return without(s, "NetworkPolicy", "headcount-redis-egress")
		}},
		{"peer selects nothing", single, "networkpolicy", "peer podSelector map[app.kubernetes.io/instance:headcount-redis app.kubernetes.io/name:rediss] selects no pods", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "headcount-redis-egress").Spec.Egress[0].To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] = "rediss"
			return s
		}},
		{"rule on a port name no pod has", cluster, "networkpolicy", "port admin is no port of Deployment/cleaner", func(t *testing.T, s *Set) *Set {
			netpol(t, s, "metrics-ingress").Spec.Ingress[0].Ports[0].Port = ptr(intstr.FromString("admin"))
			return s
		}},
		{"cleaner cannot reach the wsnodes' admin port", cluster, "networkpolicy", "Deployment/cleaner: no egress rule lets it reach the admin port metrics of Deployment/wsnode", func(t *testing.T, s *Set) *Set {
			return without(s, "NetworkPolicy", "cleaner-watch-egress")
		}},
		{"wsnode admin port closed to the cleaner", cluster, "networkpolicy", "Deployment/wsnode: no ingress rule lets Deployment/cleaner reach its admin port", func(t *testing.T, s *Set) *Set {
			return without(s, "NetworkPolicy", "wsnode-watch-ingress")
		}},
		{"wsnode advertises no host", cluster, "networkpolicy", "Deployment/wsnode: no --advertise-host", func(t *testing.T, s *Set) *Set {
			c := &deploy(t, s, "wsnode").Spec.Template.Spec.Containers[0]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "HEADCOUNT_ADVERTISE_HOST" })
			return s
		}},
		// spread
		{"no zone spread", cluster, "spread", "Deployment/wsnode: no topologySpreadConstraint over topology.kubernetes.io/zone", func(t *testing.T, s *Set) *Set {
			spec := &deploy(t, s, "wsnode").Spec.Template.Spec
			spec.TopologySpreadConstraints = spec.TopologySpreadConstraints[:1]
			return s
		}},
		{"hard spread over cordoned and tainted nodes", cluster, "spread", "Deployment/wsnode: spread over kubernetes.io/hostname is DoNotSchedule but counts cordoned and tainted nodes", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "wsnode").Spec.Template.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = nil
			return s
		}},
		{"spread counts another workload's pods", cluster, "spread", "Deployment/httpapi: spread over kubernetes.io/hostname counts pods", func(t *testing.T, s *Set) *Set {
			deploy(t, s, "httpapi").Spec.Template.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels["app.kubernetes.io/name"] = "wsnode"
			return s
		}},
		// servicemonitor
		{"ServiceMonitor selects no Service", monitored, "servicemonitor", "selects no Service", func(t *testing.T, s *Set) *Set {
			s.ServiceMonitors[0].Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "metrics"
			return s
		}},
		{"ServiceMonitor on a port the Service lacks", monitored, "servicemonitor", `port "admin" is not a port of Service/headcount-metrics`, func(t *testing.T, s *Set) *Set {
			s.ServiceMonitors[0].Spec.Endpoints[0].Port = "admin"
			return s
		}},
		// ingress
		{"Ingress without an /apps path", ingressed, "ingress", `no path takes /apps/app-id/events, which httpapi serves`, func(t *testing.T, s *Set) *Set {
			s.Ingresses[0].Spec.Rules[0].HTTP.Paths = s.Ingresses[0].Spec.Rules[0].HTTP.Paths[:1]
			return s
		}},
		{"Ingress sends everything to wsnode", ingressed, "ingress", `/apps/app-id/events goes to wsnode (path /), not to httpapi`, func(t *testing.T, s *Set) *Set {
			paths := s.Ingresses[0].Spec.Rules[0].HTTP.Paths
			paths[1].Path, paths[1].Backend = "/", paths[0].Backend
			return s
		}},
		{"Ingress backend port missing", ingressed, "ingress", `port web is not a port of Service/httpapi`, func(t *testing.T, s *Set) *Set {
			s.Ingresses[0].Spec.Rules[0].HTTP.Paths[1].Backend.Service.Port.Name = "web"
			return s
		}},
		{"Ingress backend Service missing", ingressed, "ingress", `Service "ws" is not in the render`, func(t *testing.T, s *Set) *Set {
			s.Ingresses[0].Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "ws"
			return s
		}},
		{"Ingress with nginx's 60 s timeout", ingressed, "ingress", `proxy-read-timeout is "60"`, func(t *testing.T, s *Set) *Set {
			s.Ingresses[0].Annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"] = "60"
			return s
		}},
		{"Ingress without a send timeout", ingressed, "ingress", `proxy-send-timeout is ""`, func(t *testing.T, s *Set) *Set {
			delete(s.Ingresses[0].Annotations, "nginx.ingress.kubernetes.io/proxy-send-timeout")
			return s
		}},
		{"Ingress host without TLS", ingressed, "ingress", `host "realtime.example.com": no tls entry`, func(t *testing.T, s *Set) *Set {
			s.Ingresses[0].Spec.TLS[0].SecretName = ""
			return s
		}},
		// prometheusrule
		{"rule that alerts and records", chartSingle, "prometheusrule", "needs exactly one of alert and record", func(t *testing.T, s *Set) *Set {
			s.PrometheusRules[0].Spec.Groups = []RuleGroup{{Name: "headcount", Rules: []Rule{{Alert: "A", Record: "r", Expr: intstr.FromString("up")}}}}
			return s
		}},
		{"group twice", chartSingle, "prometheusrule", `group "headcount" twice`, func(t *testing.T, s *Set) *Set {
			g := RuleGroup{Name: "headcount", Rules: []Rule{{Alert: "A", Expr: intstr.FromString("up == 0")}}}
			s.PrometheusRules[0].Spec.Groups = []RuleGroup{g, g}
			return s
		}},
		{"for that is no duration", chartSingle, "prometheusrule", `for "5 minutes" is not a duration`, func(t *testing.T, s *Set) *Set {
			s.PrometheusRules[0].Spec.Groups = []RuleGroup{{Name: "headcount", Rules: []Rule{{Alert: "A", Expr: intstr.FromString("up == 0"), For: "5 minutes"}}}}
			return s
		}},
	}
	checks := map[string]Check{}
	for _, c := range Checks {
		checks[c.Name] = c
	}
	covered := map[string]bool{}
	for _, c := range cases {
		t.Run(c.check+"/"+c.name, func(t *testing.T) {
			check, ok := checks[c.check]
			if !ok {
				t.Fatalf("no check %q", c.check)
			}
			covered[c.check] = true
			s := c.mutate(t, load(t, c.target))
			errs := check.Run(s)
			for _, err := range errs {
				if strings.Contains(err.Error(), c.want) {
					return
				}
			}
			t.Fatalf("check %s did not report %q; it reported %v", c.check, c.want, errs)
		})
	}
	for _, c := range Checks {
		if !covered[c.Name] {
			t.Errorf("check %s has no case here that shows it catching a broken manifest", c.Name)
		}
	}
}
