// Package validate renders deploy/k8s with the kustomize Go API, and the
// Helm chart deploy/helm/headcount with a helm binary (Chart), decodes
// every object strictly into its k8s.io/api type, and checks what the
// headcount binaries need from their manifests: selectors that select,
// probes on the admin paths the binaries serve, a grace period that covers
// the wsnode drain, resources, hardening, the apps Secret mounted (or the
// apps database URL from a Secret), Redis TLS files from Secrets, no
// secret in a ConfigMap, an Ingress that routes the Pusher paths to the
// binaries that serve them, NetworkPolicies that select headcount's own
// pods (never the whole namespace) and let the cleaners reach the wsnodes'
// admin port at the host they advertise, spreads over nodes that never hold a
// drain, and well-formed alerting rules. Its tests also keep the chart's
// renders equal to the overlays but where they differ on purpose
// (TestChartMatchesKustomize) and deploy/prometheus/alerts.yaml equal to
// the chart's rules (TestAlertsFileIsChartRender), run promtool on the
// rules rendered with other values and per release, and keep the chart fit
// for other people's clusters: two releases in one namespace, a subchart,
// a password on its Redis, an image that exists (release_test.go).
// It needs no cluster; cmd/k8s-dryrun adds the checks only an API server
// can make, and the sim module (make k8s-sim) what only a running cluster
// shows: the chart installed, upgraded and drained with the real helm.
//
// Everything here is single-goroutine; a Set is not safe for concurrent
// mutation.
package validate
