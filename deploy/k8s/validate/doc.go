// Package validate renders deploy/k8s with the kustomize Go API, decodes
// every object strictly into its k8s.io/api type, and checks what the
// headcount binaries need from their manifests: selectors that select,
// probes on the admin paths the binaries serve, a grace period that covers
// the wsnode drain, resources, hardening, the apps Secret mounted, no
// secret in a ConfigMap, and an Ingress that routes the Pusher paths to the
// binaries that serve them. It needs no cluster; cmd/k8s-dryrun adds the
// checks only an API server can make.
//
// Everything here is single-goroutine; a Set is not safe for concurrent
// mutation.
package validate
