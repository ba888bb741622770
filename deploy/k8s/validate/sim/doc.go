// Package sim runs the Helm chart (deploy/helm/headcount) with the real
// helm binary against a simulated Kubernetes cluster, for real: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler built from
// the Go module proxy (as for make k8s-validate-server), and kwok, which
// plays the kubelet of a few fake Nodes, so that pods are scheduled by the
// real scheduler and become Running and Ready without an image being
// pulled or run (make k8s-sim).
//
// Its tests (the package holds no other code) show what no render can: a
// release's lifecycle (install, upgrade, rollback, uninstall, with every
// Deployment and StatefulSet available on the fake nodes), the bundled
// Redis password that `lookup` keeps across upgrades, two releases and
// another application sharing a namespace (their pods, as the API server
// holds them, selected by the NetworkPolicies of their own release only),
// the chart as a subchart, a node drained through the Eviction API with the
// disruption budgets enforced, and a tainted node pool. Nothing here
// enforces NetworkPolicies or runs the binaries: this is about the chart's
// objects, scheduling, budgets and lifecycle.
//
// The tests skip, saying why, unless the binaries are named in the
// environment (K8S_SIM_* and HELM; sim.sh sets them). Every process
// listens on 127.0.0.1 only and dies with the test binary; the whole run is
// bounded by go test's -timeout and each wait by a deadline. A module of
// its own, so that k8s.io/kubectl (the drain) stays out of the validate
// module that make k8s-validate builds.
package sim
