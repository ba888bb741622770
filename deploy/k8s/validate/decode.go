package validate

import (
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to a constructor of its typed object: the
// kinds deploy/k8s and the chart (deploy/helm/headcount) may hold. Anything else fails, so a typo in a kind or
// an apiVersion never slips through as "unknown, skipped".
var kinds = map[string]func() any{
	"v1/Namespace":                            func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"batch/v1/CronJob":                        func() any { return &batchv1.CronJob{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":            func() any { return &networkingv1.Ingress{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &ServiceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &PrometheusRule{} },
	"gateway.networking.k8s.io/v1/HTTPRoute":  func() any { return &HTTPRoute{} },
}

// Object is one rendered object: its YAML as kustomize wrote it, and the
// typed value it decoded to. Checks read Typed, which tests mutate.
type Object struct {
	APIVersion, Kind, Name string
	// YAML is the rendered document (what the server dry run sends).
	YAML []byte
	// Typed is a pointer to the k8s.io/api type (or ServiceMonitor).
	Typed any
}

// ID names the object in messages: Kind/name.
func (o *Object) ID() string { return o.Kind + "/" + o.Name }

// DecodeObject decodes one YAML document strictly: a field the type does
// not have, a field given twice, a field in the wrong case and a value of
// the wrong type all fail.
func DecodeObject(doc []byte) (*Object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return nil, fmt.Errorf("apiVersion/kind: %w", err)
	}
	newT, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("%s %s: not a kind deploy/k8s or the chart may hold (decode.go lists them)", tm.APIVersion, tm.Kind)
	}
	typed := newT()
	strict, err := kjson.UnmarshalStrict(j, typed, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	meta, ok := typed.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%s: no metadata", tm.Kind)
	}
	if meta.GetName() == "" {
		return nil, fmt.Errorf("%s: no metadata.name", tm.Kind)
	}
	return &Object{APIVersion: tm.APIVersion, Kind: tm.Kind, Name: meta.GetName(), YAML: doc, Typed: typed}, nil
}

// ServiceMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor that deploy/k8s uses. Its type
// is not in k8s.io/api; decoding strictly into this subset still fails on
// a misspelt or misplaced field.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec is the subset of the real spec we use.
type ServiceMonitorSpec struct {
	Selector          metav1.LabelSelector     `json:"selector"`
	Endpoints         []ServiceMonitorEndpoint `json:"endpoints"`
	NamespaceSelector *struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	} `json:"namespaceSelector,omitempty"`
	JobLabel string `json:"jobLabel,omitempty"`
}

// ServiceMonitorEndpoint is one scrape endpoint.
type ServiceMonitorEndpoint struct {
	Port          string `json:"port"`
	Path          string `json:"path,omitempty"`
	Interval      string `json:"interval,omitempty"`
	ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
	Scheme        string `json:"scheme,omitempty"`
	// Relabelings and MetricRelabelings are the operator's RelabelConfigs,
	// passed through from values unread.
	Relabelings       []map[string]any `json:"relabelings,omitempty"`
	MetricRelabelings []map[string]any `json:"metricRelabelings,omitempty"`
}

// HTTPRoute is the part of the Gateway API's gateway.networking.k8s.io/v1
// HTTPRoute that the chart uses, decoded strictly as ServiceMonitor is.
type HTTPRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HTTPRouteSpec `json:"spec"`
}

// HTTPRouteSpec is the subset of the real spec the chart writes.
type HTTPRouteSpec struct {
	ParentRefs []struct {
		Group       string `json:"group,omitempty"`
		Kind        string `json:"kind,omitempty"`
		Namespace   string `json:"namespace,omitempty"`
		Name        string `json:"name"`
		SectionName string `json:"sectionName,omitempty"`
		Port        int32  `json:"port,omitempty"`
	} `json:"parentRefs"`
	Hostnames []string `json:"hostnames,omitempty"`
	Rules     []struct {
		Matches []struct {
			Path *struct {
				Type  string `json:"type"`
				Value string `json:"value"`
			} `json:"path,omitempty"`
		} `json:"matches,omitempty"`
		BackendRefs []struct {
			Name string `json:"name"`
			Port int32  `json:"port"`
		} `json:"backendRefs"`
	} `json:"rules"`
}

// PrometheusRule is the Prometheus Operator's monitoring.coreos.com/v1
// PrometheusRule, whole but for status: its spec holds a rule file's
// groups, so a field a rule file may not have fails the strict decode.
type PrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PrometheusRuleSpec `json:"spec"`
}

// PrometheusRuleSpec is a rule file: its groups.
type PrometheusRuleSpec struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of a Prometheus rule file.
type RuleGroup struct {
	Name                    string            `json:"name"`
	Interval                string            `json:"interval,omitempty"`
	QueryOffset             string            `json:"query_offset,omitempty"`
	Limit                   *int              `json:"limit,omitempty"`
	PartialResponseStrategy string            `json:"partial_response_strategy,omitempty"`
	Labels                  map[string]string `json:"labels,omitempty"`
	Rules                   []Rule            `json:"rules"`
}

// Rule is an alerting or a recording rule.
type Rule struct {
	Record        string             `json:"record,omitempty"`
	Alert         string             `json:"alert,omitempty"`
	Expr          intstr.IntOrString `json:"expr"`
	For           string             `json:"for,omitempty"`
	KeepFiringFor string             `json:"keep_firing_for,omitempty"`
	Labels        map[string]string  `json:"labels,omitempty"`
	Annotations   map[string]string  `json:"annotations,omitempty"`
}
