#!/usr/bin/env bash
# server.sh (make k8s-validate-server): server-side validation of deploy/k8s
# against a real kube-apiserver, offline.
#
# 1. Builds kube-apiserver (k8s.io/kubernetes v1.36.3) and etcd
#    (go.etcd.io/etcd/server/v3 v3.6.8) from the Go module proxy, once
#    (build.sh, which make k8s-sim shares): the binaries are cached in
#    $K8S_SERVER_CACHE (.cache/k8s-server, ignored by git). The first
#    kube-apiserver build took 8.5 to 18 minutes on 2 busy cores; etcd then takes
#    seconds (it shares most packages).
# 2. Runs cmd/k8s-dryrun: etcd and kube-apiserver on free loopback ports
#    with generated certificates, every overlay (and, with $HELM, the Helm
#    chart's default render and each example's) applied with server-side
#    apply, DryRun=All, strict field validation; both servers stopped before
#    it exits, all within $K8S_SERVER_RUN_TIMEOUT. Then its test: the same
#    servers refuse a copy of deploy/k8s broken in three ways.
#
# Environment: GO (go), HELM (a helm binary; make passes the pinned one),
# K8S_SERVER_CACHE, K8S_SERVER_BUILD_TIMEOUT (40m), K8S_SERVER_RUN_TIMEOUT
# (seconds, 300), K8S_SERVER_KEEP_LOGS=1 keeps the servers' logs.
set -euo pipefail
# shellcheck source=build.sh
source "$(dirname "${BASH_SOURCE[0]}")/build.sh"
run_timeout=${K8S_SERVER_RUN_TIMEOUT:-300}

build_k8s kube-apiserver etcd

# k8s-dryrun itself is small and follows the working tree: rebuild it each run.
(cd "$here" && "$GO" build -o "$cache/bin/k8s-dryrun" ./cmd/k8s-dryrun)

keep=()
[[ ${K8S_SERVER_KEEP_LOGS:-} == 1 ]] && keep=(-keep-logs)
# k8s-dryrun stops the servers itself within -timeout; timeout(1) is the
# backstop, and the servers die with it (PR_SET_PDEATHSIG).
status=0
# The chart's renders too, when make passes the pinned helm.
chart=()
[[ -n ${HELM:-} ]] && chart=(-helm "$HELM")
timeout --kill-after=10s "$((run_timeout + 30))" "$cache/bin/k8s-dryrun" -root "$here/.." \
	-kube-apiserver "$apiserver" -etcd "$etcd" -timeout "${run_timeout}s" "${keep[@]}" "${chart[@]}" || status=$?
if ((status == 0)); then
	# And the same server refuses a copy broken three ways (its own servers).
	(cd "$here" && K8S_DRYRUN_APISERVER=$apiserver K8S_DRYRUN_ETCD=$etcd \
		"$GO" test -count=1 -timeout "$((run_timeout + 30))s" ./cmd/k8s-dryrun) || status=$?
fi
exit "$status"
