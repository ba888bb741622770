#!/usr/bin/env bash
# fuzz.sh (make fuzz): run every Fuzz* target in the module for FUZZTIME each.
# Targets are found with `go test -list` in each package whose tests declare
# one, so new targets are picked up without editing this file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

# Packages (as ./dir) with a `func Fuzz` in a _test.go file.
mapfile -t pkgs < <(grep -rl --include='*_test.go' --exclude-dir=node_modules --exclude-dir=.run -E '^func Fuzz[A-Z0-9_]' . |
	xargs -r -n1 dirname | sort -u)

if [ "${#pkgs[@]}" -eq 0 ]; then
	echo "fuzz: no Fuzz targets found"
	exit 0
fi

n=0
for pkg in "${pkgs[@]}"; do
	mapfile -t targets < <("$GO" test -list '^Fuzz' "$pkg" | grep -E '^Fuzz' || true)
	for t in "${targets[@]}"; do
		echo "fuzz: $pkg $t for $FUZZTIME"
		"$GO" test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "$pkg"
		n=$((n + 1))
	done
done
echo "fuzz: $n targets passed"
