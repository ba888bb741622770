#!/usr/bin/env bash
# sim.sh (make k8s-sim): the Helm chart installed with the real helm into
# a simulated Kubernetes cluster, offline (the sim module's tests).
#
# 1. Builds kube-apiserver, kube-controller-manager, kube-scheduler (all
#    k8s.io/kubernetes v1.36.3), etcd and kwok from the Go module proxy,
#    once (build.sh, shared with make k8s-validate-server).
# 2. Runs the tests of sim/: etcd, kube-apiserver, kube-controller-manager,
#    kube-scheduler and kwok on 127.0.0.1 (free ports, a temporary
#    directory), a few fake nodes that kwok keeps Ready and whose pods it
#    makes Running and Ready, then each scenario with the pinned helm. The
#    processes die with the test binary, which go test's -timeout bounds.
#
# Environment: GO (go), HELM (the helm binary; make passes the pinned one),
# K8S_SERVER_CACHE, K8S_SERVER_BUILD_TIMEOUT (40m), K8S_SIM_TIMEOUT (20m,
# the whole test run), K8S_SIM_RUN (a go test -run pattern),
# K8S_SIM_KEEP_LOGS=1 keeps the processes' logs.
set -euo pipefail
# shellcheck source=build.sh
source "$(dirname "${BASH_SOURCE[0]}")/build.sh"

if [[ -z ${HELM:-} ]]; then
	echo "k8s-sim: HELM must name a helm binary (make k8s-sim passes the pinned one)" >&2
	exit 2
fi
build_k8s kube-apiserver etcd kube-scheduler kube-controller-manager kwok
kwok_dir=$(kwok_source)
if [[ ! -d $kwok_dir ]]; then
	echo "k8s-sim: cannot find kwok's module directory (go mod download sigs.k8s.io/kwok@$kwok_version)" >&2
	exit 1
fi

cd "$here/sim"
K8S_SIM_ETCD=$etcd K8S_SIM_APISERVER=$apiserver K8S_SIM_CONTROLLER_MANAGER=$controller_manager \
	K8S_SIM_SCHEDULER=$scheduler K8S_SIM_KWOK=$kwok K8S_SIM_KWOK_SOURCE=$kwok_dir HELM=$HELM \
	"$GO" test -count=1 -v -timeout "${K8S_SIM_TIMEOUT:-20m}" -run "${K8S_SIM_RUN:-.}" .
