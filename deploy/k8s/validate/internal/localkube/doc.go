// Package localkube runs a Kubernetes control plane from binaries built
// from the Go module proxy: etcd and kube-apiserver (what cmd/k8s-dryrun
// needs), and optionally kube-controller-manager, kube-scheduler and kwok
// (what the simulated cluster of the sim module needs), with certificates
// it makes for the run. Everything listens on 127.0.0.1 only, on free
// ports, with its state under a directory the caller gives; every process
// is killed with the one that started it (PR_SET_PDEATHSIG), so nothing
// outlives a run, even a killed one. Start returns only once the API server
// is ready (and, with a controller manager, its controllers act), within
// the caller's context.
//
// A Cluster is used from one goroutine.
package localkube
