package validate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestChartRedisExporter: redis.single.exporter.enabled puts redis_exporter
// in the single Redis's pod, reading the password from the Redis Secret,
// on the Redis Service's metrics port, admitted from the monitoring
// namespace and scraped by a ServiceMonitor of its own (instance set to the
// pod's name), whose job the release's HeadcountRedisMemoryHigh selects:
// promtool fires it for that Redis's series and not for another Redis's in
// the namespace. Off, the default, none of it is there.
func TestChartRedisExporter(t *testing.T) {
	c := testChart(t)
	monitoring := "serviceMonitor.enabled=true,prometheusRule.enabled=true"
	// examples/single-redis.yaml turns it on too, so TestChartTargetsPass
	// runs every check on it.
	groups, s := prometheusRule(t, c, "--set", monitoring+",redis.single.exporter.enabled=true")
	redisName := chartPrefix + "redis"

	var pod *corev1.PodSpec
	for _, sts := range s.StatefulSets {
		if sts.Name == redisName {
			pod = &sts.Spec.Template.Spec
		}
	}
	if pod == nil {
		t.Fatalf("no StatefulSet %s", redisName)
	}
	var redis, exporter *corev1.Container
	for i := range pod.Containers {
		switch pod.Containers[i].Name {
		case "redis":
			redis = &pod.Containers[i]
		case "redis-exporter":
			exporter = &pod.Containers[i]
		}
	}
	if redis == nil || exporter == nil {
		t.Fatalf("the Redis pod's containers: %v; want redis and redis-exporter", pod.Containers)
	}
	if !slices.ContainsFunc(exporter.Env, func(e corev1.EnvVar) bool {
		return e.Name == "REDIS_PASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == chartRedisSecret
	}) {
		t.Errorf("redis-exporter does not read REDIS_PASSWORD from %s: %v", chartRedisSecret, exporter.Env)
	}
	if !equality.Semantic.DeepEqual(redis.SecurityContext, exporter.SecurityContext) {
		t.Errorf("redis-exporter's securityContext %v differs from Redis's %v", exporter.SecurityContext, redis.SecurityContext)
	}
	if exporter.ReadinessProbe != nil {
		t.Error("redis-exporter has a readiness probe: its failure would take Redis out of its Service")
	}

	metricsPort := func(svc *corev1.Service) bool {
		return slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" })
	}
	for _, svc := range s.Services {
		if svc.Name == redisName && !metricsPort(svc) {
			t.Errorf("Service/%s has no metrics port: %v", svc.Name, svc.Spec.Ports)
		}
	}
	admitted := false
	for _, np := range s.NetworkPolicies {
		if np.Name != redisName+"-ingress" {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			fromMonitoring := slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool {
				return p.NamespaceSelector != nil && p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "monitoring"
			})
			onMetrics := slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.String() == "metrics" })
			admitted = admitted || fromMonitoring && onMetrics
		}
	}
	if !admitted {
		t.Errorf("NetworkPolicy/%s-ingress does not admit the monitoring namespace to the exporter's metrics port", redisName)
	}
	monitors := 0
	for _, sm := range s.ServiceMonitors {
		if len(sm.Spec.Endpoints) == 0 || len(sm.Spec.Endpoints[0].Relabelings) == 0 ||
			sm.Spec.Endpoints[0].Relabelings[0]["targetLabel"] != "instance" {
			t.Errorf("ServiceMonitor/%s does not set instance to the pod's name first: %v", sm.Name, sm.Spec.Endpoints)
		}
		if sm.Name == redisName {
			monitors++
		}
	}
	if monitors != 1 {
		t.Errorf("%d ServiceMonitors named %s, want 1", monitors, redisName)
	}

	// The release's alert: the exporter's series, not another Redis's.
	for i := range groups {
		for j := range groups[i].Rules {
			groups[i].Rules[j].Annotations = nil
		}
	}
	rules := writeRules(t, "rules.yaml", groups)
	series := ""
	for _, job := range []string{redisName, "other-redis"} {
		sel := `{namespace="` + c.Namespace + `", job="` + job + `", instance="` + job + `-0"}`
		series += "      - series: 'redis_memory_used_bytes" + sel + "'\n        values: '1900x60'\n" +
			"      - series: 'redis_memory_max_bytes" + sel + "'\n        values: '2000x60'\n"
	}
	tests := "rule_files: [" + rules + "]\nevaluation_interval: 30s\ntests:\n  - interval: 15s\n    input_series:\n" + series +
		"    alert_rule_test:\n      - eval_time: 13m\n        alertname: HeadcountRedisMemoryHigh\n        exp_alerts:\n" +
		"          - exp_labels: {severity: warning, namespace: " + c.Namespace + ", job: " + redisName + ", instance: " + redisName + "-0}\n"
	path := filepath.Join(t.TempDir(), "tests.yaml")
	if err := os.WriteFile(path, []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "test", "rules", path)

	// Off (the default): no sidecar, no port, and the alert selects the
	// namespace alone, as before.
	groups, s = prometheusRule(t, c, "--set", monitoring)
	for _, sts := range s.StatefulSets {
		for _, ctr := range sts.Spec.Template.Spec.Containers {
			if ctr.Name == "redis-exporter" {
				t.Errorf("StatefulSet/%s has redis-exporter with the exporter off", sts.Name)
			}
		}
	}
	for _, svc := range s.Services {
		if svc.Name == redisName && metricsPort(svc) {
			t.Errorf("Service/%s has a metrics port with the exporter off", svc.Name)
		}
	}
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Alert == "HeadcountRedisMemoryHigh" && strings.Contains(r.Expr.String(), "job=") {
				t.Errorf("with the exporter off the alert selects a job: %s", r.Expr.String())
			}
		}
	}
}
