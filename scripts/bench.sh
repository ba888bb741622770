#!/usr/bin/env bash
# bench.sh (make bench): run the counts benchmarks against a real Redis and
# write BENCHMARKS.md: a table of every benchmark line (ns/op and any custom
# metric such as changes/s or roundtrips/1000changes), the exact command, the
# date, the Go version and the machine. BENCHMARKS.md is only replaced when
# the run succeeds.
#
# Environment: BENCHTIME (2s), BENCH (regexp, default .), BENCH_PKG
# (./pkg/counts/), BENCHFLAGS (extra go test flags), GO (go), OUT (BENCHMARKS.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
BENCHTIME=${BENCHTIME:-2s}
BENCH=${BENCH:-.}
BENCH_PKG=${BENCH_PKG:-./pkg/counts/}
OUT=${OUT:-BENCHMARKS.md}
read -r -a extra <<<"${BENCHFLAGS:-}"

bash scripts/ensure-deps.sh

cmd=("$GO" test -run '^$' -bench "$BENCH" -benchtime "$BENCHTIME" -count 1 "${extra[@]}" "$BENCH_PKG")
# The command as one would type it (single quotes only where needed).
shq() {
	if [[ $1 =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
cmd_text=go
for a in "${cmd[@]:1}"; do cmd_text+=" $(shq "$a")"; done

raw=$(mktemp)
trap 'rm -f "$raw" "$raw.md"' EXIT

echo "bench: $cmd_text"
if ! "${cmd[@]}" 2>&1 | tee "$raw"; then
	echo "bench: the benchmark run failed; $OUT left unchanged" >&2
	exit 1
fi

# Benchmark lines: Name-P  N  v1 unit1  v2 unit2 ...
if ! grep -qE '^Benchmark[^[:space:]]*[[:space:]]+[0-9]+[[:space:]]' "$raw"; then
	echo "bench: no benchmark results in the output; $OUT left unchanged" >&2
	exit 1
fi

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
[ -n "$cpu" ] || cpu=$(awk '/^cpu:/ {sub(/^cpu: /, ""); print; exit}' "$raw")
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null || echo "?")
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576; exit}' /proc/meminfo 2>/dev/null || true)
redis_version=$(redis-server --version 2>/dev/null | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^v=/) {sub(/^v=/, "", $i); print $i}}')

{
	echo "# Benchmarks"
	echo
	echo "Written by \`make bench\` (scripts/bench.sh); numbers from one run on the machine below."
	echo
	echo "- Command: \`$cmd_text\`"
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- Go: $("$GO" version)"
	echo "- CPU: ${cpu:-unknown}, $cores cores${mem:+, $mem memory}"
	echo "- Redis: ${redis_version:-unknown} (redis-server on loopback)"
	echo
	# Columns: benchmark, iterations, then every unit in order of first appearance.
	awk '
		/^Benchmark[^[:space:]]*[[:space:]]+[0-9]+[[:space:]]/ {
			row++
			name[row] = $1
			iters[row] = $2
			for (i = 3; i + 1 <= NF; i += 2) {
				unit = $(i + 1)
				if (!(unit in seen)) { seen[unit] = 1; units[++nu] = unit }
				val[row, unit] = $i
			}
		}
		END {
			printf "| benchmark | iterations |"
			for (u = 1; u <= nu; u++) printf " %s |", units[u]
			printf "\n|---|---:|"
			for (u = 1; u <= nu; u++) printf "---:|"
			printf "\n"
			for (r = 1; r <= row; r++) {
				printf "| %s | %s |", name[r], iters[r]
				for (u = 1; u <= nu; u++) {
					k = (r SUBSEP units[u])
					printf " %s |", ((k in val) ? val[k] : "")
				}
				printf "\n"
			}
		}' "$raw"
	echo
	echo "Raw output:"
	echo
	echo '```'
	grep -vE '^(ok|PASS)([[:space:]]|$)' "$raw" || true
	echo '```'
} >"$raw.md"
mv "$raw.md" "$OUT"
echo "bench: wrote $OUT"
