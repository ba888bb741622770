#!/usr/bin/env bash
# server.sh (make k8s-validate-server): server-side validation of deploy/k8s
# against a real kube-apiserver, offline.
#
# 1. Builds kube-apiserver (k8s.io/kubernetes v1.36.3) and etcd
#    (go.etcd.io/etcd/server/v3 v3.6.8) from the Go module proxy, once: the
#    binaries are cached in $K8S_SERVER_CACHE (.cache/k8s-server, ignored by
#    git). The versions come from server/go.mod. Builds run under nice -n 19,
#    one at a time (a lock), each bounded by $K8S_SERVER_BUILD_TIMEOUT. The
#    first kube-apiserver build took 8.5 minutes on 2 busy cores; etcd then
#    takes seconds (it shares most packages).
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
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)

GO=${GO:-go}
cache=${K8S_SERVER_CACHE:-$repo/.cache/k8s-server}
build_timeout=${K8S_SERVER_BUILD_TIMEOUT:-40m}
run_timeout=${K8S_SERVER_RUN_TIMEOUT:-300}

version_of() { awk -v m="$1" '$1 == m && $2 ~ /^v[0-9]/ { print $2; exit }' "$here/server/go.mod"; }
k8s_version=$(version_of k8s.io/kubernetes)
etcd_version=$(version_of go.etcd.io/etcd/server/v3)
if [[ -z $k8s_version || -z $etcd_version ]]; then
	echo "k8s-validate-server: cannot read the versions from $here/server/go.mod" >&2
	exit 2
fi

mkdir -p "$cache/bin"
# The cache ignores itself, so nothing in it is ever committed.
[[ -f $cache/.gitignore ]] || printf '*\n' >"$cache/.gitignore"

apiserver=$cache/bin/kube-apiserver-$k8s_version
etcd=$cache/bin/etcd-$etcd_version

build() { # name package output ldflags
	local name=$1 pkg=$2 out=$3 ldflags=$4 start
	[[ -x $out ]] && return 0
	echo "k8s-validate-server: building $name $pkg (first run only; nice -n 19, at most $build_timeout)"
	start=$(date +%s)
	if ! (cd "$here/server" && timeout "$build_timeout" nice -n 19 "$GO" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg"); then
		rm -f "$out.tmp"
		echo "k8s-validate-server: building $name failed or took longer than $build_timeout" >&2
		return 1
	fi
	mv "$out.tmp" "$out"
	echo "k8s-validate-server: built $name in $(($(date +%s) - start))s"
}

(
	# One build at a time, even across concurrent invocations.
	flock 9
	minor=${k8s_version#v1.}
	minor=${minor%%.*}
	build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$apiserver" \
		"-X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	build etcd go.etcd.io/etcd/server/v3 "$etcd" ""
) 9>"$cache/build.lock"

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
