# build.sh: sourced by server.sh (make k8s-validate-server) and sim.sh
# (make k8s-sim). Builds the Kubernetes binaries from the Go module proxy,
# each once, into $K8S_SERVER_CACHE/bin (.cache/k8s-server, ignored by
# git), named with its version, under nice -n 19, one build at a time even
# across concurrent runs (a lock), each bounded by $K8S_SERVER_BUILD_TIMEOUT.
#
# Versions: k8s.io/kubernetes and etcd come from server/go.mod (its tool
# lines list what it builds); kwok from $kwok_version below, built with
# its own go.mod (go install), since its k8s.io requirements are its own.
#
# After sourcing: build_k8s NAME... (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok) and the binaries' paths: $apiserver, $etcd,
# $controller_manager, $scheduler, $kwok; kwok_source prints kwok's module
# directory (its default Stage files).

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)

GO=${GO:-go}
cache=${K8S_SERVER_CACHE:-$repo/.cache/k8s-server}
build_timeout=${K8S_SERVER_BUILD_TIMEOUT:-40m}
kwok_version=v0.8.0

version_of() { awk -v m="$1" '$1 == m && $2 ~ /^v[0-9]/ { print $2; exit }' "$here/server/go.mod"; }
k8s_version=$(version_of k8s.io/kubernetes)
etcd_version=$(version_of go.etcd.io/etcd/server/v3)
if [[ -z $k8s_version || -z $etcd_version ]]; then
	echo "k8s build: cannot read the versions from $here/server/go.mod" >&2
	exit 2
fi

mkdir -p "$cache/bin"
# The cache ignores itself, so nothing in it is ever committed.
[[ -f $cache/.gitignore ]] || printf '*\n' >"$cache/.gitignore"

apiserver=$cache/bin/kube-apiserver-$k8s_version
controller_manager=$cache/bin/kube-controller-manager-$k8s_version
scheduler=$cache/bin/kube-scheduler-$k8s_version
etcd=$cache/bin/etcd-$etcd_version
kwok=$cache/bin/kwok-$kwok_version/kwok

# build NAME PACKAGE OUTPUT LDFLAGS: go build in server/ (its go.mod).
build() {
	local name=$1 pkg=$2 out=$3 ldflags=$4 start
	[[ -x $out ]] && return 0
	echo "k8s build: building $name $pkg (first run only; nice -n 19, at most $build_timeout)"
	start=$(date +%s)
	if ! (cd "$here/server" && timeout "$build_timeout" nice -n 19 "$GO" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg"); then
		rm -f "$out.tmp"
		echo "k8s build: building $name failed or took longer than $build_timeout" >&2
		return 1
	fi
	mv "$out.tmp" "$out"
	echo "k8s build: built $name in $(($(date +%s) - start))s"
}

# build_kwok: go install at the pinned version, so kwok's own go.mod
# chooses its dependencies.
build_kwok() {
	local dir=${kwok%/*} start
	[[ -x $kwok ]] && return 0
	echo "k8s build: building kwok $kwok_version (first run only; nice -n 19, at most $build_timeout)"
	start=$(date +%s)
	rm -rf "$dir.tmp"
	if ! (cd "$here" && GOBIN="$dir.tmp" timeout "$build_timeout" nice -n 19 "$GO" install -trimpath "sigs.k8s.io/kwok/cmd/kwok@$kwok_version"); then
		rm -rf "$dir.tmp"
		echo "k8s build: building kwok failed or took longer than $build_timeout" >&2
		return 1
	fi
	rm -rf "$dir"
	mv "$dir.tmp" "$dir"
	echo "k8s build: built kwok in $(($(date +%s) - start))s"
}

kwok_source() {
	(cd "$here" && "$GO" mod download -json "sigs.k8s.io/kwok@$kwok_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
}

build_k8s() {
	local minor=${k8s_version#v1.} ldflags name
	minor=${minor%%.*}
	# What the release build stamps: the servers compare versions.
	ldflags="-X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	(
		flock 9
		for name in "$@"; do
			case $name in
			kube-apiserver) build "$name" k8s.io/kubernetes/cmd/kube-apiserver "$apiserver" "$ldflags" ;;
			kube-controller-manager) build "$name" k8s.io/kubernetes/cmd/kube-controller-manager "$controller_manager" "$ldflags" ;;
			kube-scheduler) build "$name" k8s.io/kubernetes/cmd/kube-scheduler "$scheduler" "$ldflags" ;;
			etcd) build etcd go.etcd.io/etcd/server/v3 "$etcd" "" ;;
			kwok) build_kwok ;;
			*) echo "k8s build: unknown binary $name" >&2 && return 2 ;;
			esac || return 1
		done
	) 9>"$cache/build.lock"
}
