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

# The command as one would type it (single quotes only where needed).
shq() {
	if [[ $1 =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
# Each run: package, benchmark regexp, benchtime (space-separated). The process-level
# benchmarks run once (1x): they size themselves (20,000 idle sockets,
# 10,000 subscribers).
runs=(
	"${BENCH_PKG:-./pkg/counts/} $BENCH $BENCHTIME"
	"./pkg/fanout/ $BENCH $BENCHTIME"
	"./pkg/httpapi/ $BENCH $BENCHTIME"
	"./pkg/admission/ $BENCH $BENCHTIME"
	"./test/e2e/ IdleMemory|PublishLatency|LoopbackFloor 1x"
	"./test/e2e/ GetChannel|Listing100k $BENCHTIME"
	"./test/e2e/ Load 1x"
	"./test/e2e/ Recovery 1x"
)
# The process-level benchmarks draw their plots here (BENCHMARKS.md links them).
export HC_BENCH_PLOTS="$PWD/docs/bench"
mkdir -p "$HC_BENCH_PLOTS"

raw=$(mktemp)
trap 'rm -f "$raw" "$raw".*' EXIT
cmds=()
i=0
for run in "${runs[@]}"; do
	read -r pkg bench btime <<<"$run"
	[ -d "$pkg" ] || continue
	cmd=("$GO" test -run '^$' -bench "$bench" -benchtime "$btime" -count 1 "${extra[@]}" "$pkg")
	cmd_text=go
	for a in "${cmd[@]:1}"; do cmd_text+=" $(shq "$a")"; done
	echo "bench: $cmd_text"
	if ! "${cmd[@]}" 2>&1 | tee "$raw.$i"; then
		echo "bench: the benchmark run failed; $OUT left unchanged" >&2
		exit 1
	fi
	if ! grep -qE '^Benchmark[^[:space:]]*[[:space:]]+[0-9]+[[:space:]]' "$raw.$i"; then
		echo "bench: no benchmark results from $pkg; $OUT left unchanged" >&2
		exit 1
	fi
	cmds+=("$cmd_text")
	i=$((i + 1))
done

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
[ -n "$cpu" ] || cpu=$(awk '/^cpu:/ {sub(/^cpu: /, ""); print; exit}' "$raw.0")
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null || echo "?")
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576; exit}' /proc/meminfo 2>/dev/null || true)
redis_version=$(redis-server --version 2>/dev/null | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^v=/) {sub(/^v=/, "", $i); print $i}}')

{
	echo "# Benchmarks"
	echo
	echo "Written by \`make bench\` (scripts/bench.sh); numbers from one run on the machine below."
	echo
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- Go: $("$GO" version)"
	echo "- CPU: ${cpu:-unknown}, $cores cores${mem:+, $mem memory}"
	echo "- Redis: ${redis_version:-unknown} (redis-server on loopback)"
	echo
	for j in "${!cmds[@]}"; do
		echo "## \`${cmds[$j]}\`"
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
			}' "$raw.$j"
		echo
		echo '```'
		grep -vE '^(ok|PASS)([[:space:]]|$)' "$raw.$j" || true
		echo '```'
		echo
	done
	# Hand-written: what the profiles showed (kept next to the plots).
	if [ -f docs/bench/profiles.md ]; then
		cat docs/bench/profiles.md
		echo
	fi
	echo "## Plots"
	echo
	for png in docs/bench/*.png; do
		[ -e "$png" ] && echo "![${png##*/}]($png)" && echo
	done
} >"$raw.md"
mv "$raw.md" "$OUT"
echo "bench: wrote $OUT"
