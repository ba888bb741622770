#!/usr/bin/env bash
# bench.sh (make bench): run the counts benchmarks against a real Redis and
# write BENCHMARKS.md: a table of every benchmark line (ns/op and any custom
# metric such as changes/s or roundtrips/1000changes; scripts/bench-table.awk
# leaves out the cells and columns that mean nothing), the result lines
# without the benchmarks' log lines, the exact command, the date, the Go
# version and the machine, after docs/bench/summary.md (hand-written: the
# figures in words). BENCHMARKS.md is only replaced when the run
# succeeds.
#
# It also installs the peer server (soketi, pinned in test/peer; make test
# never installs it) and runs BenchmarkPeer, which measures headcount and
# soketi side by side; their section of BENCHMARKS.md is a table of both
# servers' medians (headcount's idle memory on both of its transports)
# and the ratio soketi/headcount, between the markers
# <!-- peer-begin --> and <!-- peer-end -->.
#
# Environment: BENCHTIME (2s), BENCH (regexp, default .), BENCH_PKG
# (./pkg/counts/), BENCHFLAGS (extra go test flags), GO (go), OUT (BENCHMARKS.md),
# HC_BENCH_LARGE_APP (1000000: the connections of BenchmarkLargeApp's app).
# PEER_ONLY=1 runs only the side-by-side benchmark and replaces only its
# section of OUT (the rest keeps its earlier run). HC_PEER_ROUNDS (3;
# 5 for the delivery measures), HC_PEER_SOCKETS and HC_PEER_SUBSCRIBERS
# (10,000) size it; its idle-memory measure takes about 10 minutes
# (HC_PEER_SETTLE, HC_PEER_IDLE_SOCKETS).
# BENCH_REGEN=1 runs nothing: it redoes OUT's tables and result blocks from
# the result lines OUT already holds (after a change to bench-table.awk).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
BENCHTIME=${BENCHTIME:-2s}
BENCH=${BENCH:-.}
BENCH_PKG=${BENCH_PKG:-./pkg/counts/}
OUT=${OUT:-BENCHMARKS.md}
read -r -a extra <<<"${BENCHFLAGS:-}"

if [ "${BENCH_REGEN:-}" = 1 ]; then
	tmp=$(mktemp)
	awk -v mode=regen -f scripts/bench-table.awk "$OUT" >"$tmp"
	mv "$tmp" "$OUT"
	echo "bench: redid the tables of $OUT from its result lines"
	exit 0
fi

bash scripts/ensure-deps.sh

# The peer: npm ci from the committed lock. The registry this runs against
# may lack optional packages for other platforms (msgpackr-extract's darwin
# and win32 builds), and then npm ci refuses a lock that cannot list them:
# npm install --no-save then installs the same locked versions and leaves
# the lock as committed. --ignore-scripts: the
# native addons' prebuilt or pure-JS fallbacks serve, nothing is compiled
# or downloaded.
peer_dir=test/peer
if [ -f "$peer_dir/package.json" ]; then
	npm_flags=(--ignore-scripts --no-audit --no-fund --loglevel=error)
	echo "bench: npm ci in $peer_dir (soketi)"
	if ! (cd "$peer_dir" && npm ci "${npm_flags[@]}" >/dev/null 2>&1); then
		echo "bench: npm ci in $peer_dir refused the lock; npm install --no-save (same locked versions, the lock left as committed)"
		(cd "$peer_dir" && npm install --no-save "${npm_flags[@]}" >/dev/null) || {
			echo "bench: cannot install soketi in $peer_dir; $OUT left unchanged" >&2
			exit 1
		}
	fi
fi

# The command as one would type it (single quotes only where needed).
shq() {
	if [[ $1 =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}
# Each run: package, benchmark regexp, benchtime (space-separated). The process-level
# benchmarks run once (1x): they size themselves (100,000 idle sockets,
# or what the open-file limit lets this process raise itself to; 10,000
# subscribers).
runs=(
	"${BENCH_PKG:-./pkg/counts/} $BENCH $BENCHTIME"
	"./pkg/counts/ LargeApp 1x"
	"./pkg/fanout/ $BENCH $BENCHTIME"
	"./pkg/httpapi/ $BENCH $BENCHTIME"
	"./pkg/admission/ $BENCH $BENCHTIME"
	"./pkg/history/ $BENCH $BENCHTIME"
	"./test/e2e/ IdleMemory|PublishLatency|LoopbackFloor 1x"
	"./test/e2e/ GetChannel|Listing100k $BENCHTIME"
	"./test/e2e/ Load 1x"
	"./test/e2e/ Recovery 1x"
	"./pkg/exitorder/ KillToFirstClose 1x"
	"./test/e2e/ Transport 1x"
	"./test/e2e/ Resume 1x"
	"./test/e2e/ Peer 1x"
)
if [ "${PEER_ONLY:-}" = 1 ]; then
	runs=("./test/e2e/ Peer 1x")
fi
# BenchmarkLargeApp writes an app of this many connections; it skips
# without the variable, which only its own run below is given.
large_app=${HC_BENCH_LARGE_APP:-1000000}
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
	cmd=("$GO" test -run '^$' -bench "$bench" -benchtime "$btime" -count 1 -timeout 90m "${extra[@]}" "$pkg")
	cmd_text=go
	for a in "${cmd[@]:1}"; do cmd_text+=" $(shq "$a")"; done
	envs=()
	if [ "$bench" = LargeApp ]; then
		envs=("HC_BENCH_LARGE_APP=$large_app")
		cmd_text="${envs[0]} $cmd_text"
	fi
	echo "bench: $cmd_text"
	if ! env "${envs[@]}" "${cmd[@]}" 2>&1 | tee "$raw.$i"; then
		echo "bench: the benchmark run failed; $OUT left unchanged" >&2
		exit 1
	fi
	if ! grep -qE '^Benchmark[^[:space:]]*[[:space:]]+[0-9]+[[:space:]]' "$raw.$i"; then
		echo "bench: no benchmark results from $pkg; $OUT left unchanged" >&2
		exit 1
	fi
	cmds+=("$cmd_text")
	[ "$bench" = Peer ] && peer_run=$i
	i=$((i + 1))
done

cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
[ -n "$cpu" ] || cpu=$(awk '/^cpu:/ {sub(/^cpu: /, ""); print; exit}' "$raw.0")
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null || echo "?")
mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576; exit}' /proc/meminfo 2>/dev/null || true)
redis_version=$(redis-server --version 2>/dev/null | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^v=/) {sub(/^v=/, "", $i); print $i}}')

# peer_section: the side-by-side table from BenchmarkPeer's lines
# Peer/<measure>/<server> (each server's median over the rounds).
peer_section() {
	local raw_peer=$1 cmd_text=$2
	local soketi_version uws_version
	soketi_version=$(node -p 'require("./test/peer/node_modules/@soketi/soketi/package.json").version' 2>/dev/null || echo '?')
	uws_version=$(node -p 'require("./test/peer/node_modules/uWebSockets.js/package.json").version' 2>/dev/null || echo '?')
	echo "<!-- peer-begin -->"
	echo "## headcount vs soketi, side by side"
	echo
	echo "Written by \`make bench\` from one run of \`$cmd_text\` on $(date -u '+%Y-%m-%d %H:%M UTC'):"
	echo "${cpu:-unknown CPU}, $cores cores${mem:+, $mem memory}, $("$GO" env GOVERSION), node $(node --version 2>/dev/null || echo '?'),"
	echo "Redis ${redis_version:-unknown}. soketi $soketi_version (test/peer) with uWebSockets.js $uws_version (the npm override;"
	echo "soketi 1.6.1 asks for v20.10.0, which only a git host serves). Both servers on loopback with their default timings,"
	echo "each measure on fresh processes and a fresh redis-server, ${HC_PEER_ROUNDS:-3 (five for delivery)} rounds alternating which server goes"
	echo "first; the figures are each server's median (recovery's: percentiles over its kills). The load tool, the sockets and this process share the machine's cores,"
	echo "except in delivery-split-cpus, where every server-side process (redis-server too) runs on one half of the CPUs and"
	echo "the load tool on the other, as in a deployment whose clients are elsewhere."
	echo "What each row measures: BenchmarkPeer's comment in test/e2e/bench_peer_test.go. headcount runs its default"
	echo "transport (\`--transport\`, the event loop); idle-memory, connect and delivery also run it with \`--transport goroutine\`"
	echo "(a goroutine per socket, the transport the event loop replaced)."
	echo "kernel-KiB/socket is the node's half of the kernel's slab memory per socket (as root; BenchmarkPeer's comment)."
	echo "idle-memory is settled memory: one process per server, the three at once, grown to three sizes; at each, the RSS"
	echo "once it has stayed still after HC_PEER_SETTLE (130 s) idle, past Go's forced GC and V8's idle GCs; KiB/socket is the least-squares"
	echo "slope over the sizes (MiB@N each size's RSS, intercept-MiB where the line meets zero sockets), go-heap-KiB/socket"
	echo "the slope of headcount's Go heap in use (peerIdleMemory in test/e2e/bench_peer_memory_test.go)."
	echo
	echo "How the two differ where the ratios are far from 1 (the designs, not this run's numbers):"
	echo
	echo "- count-read with a node hung: soketi asks every node over Redis pub/sub for its local count and"
	echo "  waits for a hung one until its requestsTimeout (5 s by default), then answers without that node's"
	echo "  sockets; headcount's httpapi reads the count Redis holds, so a hung wsnode does not slow the read"
	echo "  and is still counted until its cleaner removes that node's sockets after dead-after (3 s by default)."
	echo "- recovery and recovery-large: one client reads the HTTP API back to back; the figures are p50, p99"
	echo "  and max over the run's kills (kills says how many: p99 of 30 is the worst but one), not medians of"
	echo "  rounds. soketi computes counts live from the nodes that answer: a read sent while Redis still"
	echo "  lists the SIGKILLed node's subscription waits for its answer until requestsTimeout (5 s by"
	echo "  default), and a client reading continuously has such a read in flight at the kill. headcount"
	echo "  keeps counts in Redis: the active cleaner watches each node's admin port and reaps a node once"
	echo "  the watch ends and Redis has dropped its liveness subscription; reads are exact from the reap's"
	echo "  first script. The watch ends when the kernel, tearing the killed node down, closes the node's"
	echo "  end of it: among its first closes (the node holds it above every client socket, pkg/exitorder),"
	echo "  but only once the kernel has stopped the node's threads and freed its memory, which takes longer"
	echo "  the more sockets the node held (recovery-large)."
	echo "- soketi with this uWebSockets.js prints three warnings (\"writes must be made from within a corked"
	echo "  callback\") to its log for each signed HTTP API answer; that is part of its HTTP API latency here."
	echo
	echo "| measure | unit | headcount | headcount, goroutine transport | soketi | soketi / headcount |"
	echo "|---|---|---:|---:|---:|---:|"
	awk '
		/^BenchmarkPeer\/[^\/[:space:]]+\/(headcount|headcount-goroutine|soketi)-[0-9]+[[:space:]]/ {
			split($1, part, "/")
			measure = part[2]
			server = part[3]; sub(/-[0-9]+$/, "", server)
			if (!(measure in seenm)) { seenm[measure] = 1; measures[++nm] = measure }
			for (i = 3; i + 1 <= NF; i += 2) {
				unit = $(i + 1)
				if (unit == "ns/op") continue
				key = measure SUBSEP unit
				if (!(key in seenu)) { seenu[key] = 1; nu[measure]++; units[measure, nu[measure]] = unit }
				val[measure, unit, server] = $i
			}
		}
		END {
			for (m = 1; m <= nm; m++) {
				measure = measures[m]
				for (u = 1; u <= nu[measure]; u++) {
					unit = units[measure, u]
					h = val[measure, unit, "headcount"]; s = val[measure, unit, "soketi"]
					g = val[measure, unit, "headcount-goroutine"]
					ratio = (h != "" && s != "" && h + 0 != 0) ? sprintf("%.3g", s / h) : ""
					printf "| %s | %s | %s | %s | %s | %s |\n", measure, unit, h, g, s, ratio
				}
			}
		}' "$raw_peer"
	echo
	echo "<!-- peer-end -->"
}

if [ "${PEER_ONLY:-}" = 1 ]; then
	peer_section "$raw.0" "${cmds[0]}" >"$raw.peer"
	if grep -q '^<!-- peer-begin -->$' "$OUT" 2>/dev/null; then
		awk -v f="$raw.peer" '
			/^<!-- peer-begin -->$/ { while ((getline line < f) > 0) print line; skip = 1; next }
			/^<!-- peer-end -->$/ { skip = 0; next }
			!skip' "$OUT" >"$raw.md"
	else
		{ cat "$OUT"; echo; cat "$raw.peer"; } >"$raw.md"
	fi
	mv "$raw.md" "$OUT"
	echo "bench: wrote the side-by-side section of $OUT"
	exit 0
fi

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
	# Hand-written: the figures in words, ranges over the recorded runs.
	if [ -f docs/bench/summary.md ]; then
		cat docs/bench/summary.md
		echo
	fi
	for j in "${!cmds[@]}"; do
		if [ "$j" = "${peer_run:-}" ]; then
			peer_section "$raw.$j" "${cmds[$j]}"
			echo
		fi
		echo "## \`${cmds[$j]}\`"
		echo
		awk -v mode=run -f scripts/bench-table.awk "$raw.$j"
		echo
	done
	# Hand-written: what the profiles showed (kept next to the plots).
	if [ -f docs/bench/profiles.md ]; then
		cat docs/bench/profiles.md
		echo
	fi
	echo "## Plots"
	echo
	# Each plot, then its figures (the .md its benchmark wrote beside it).
	for png in docs/bench/*.png; do
		[ -e "$png" ] || continue
		echo "![${png##*/}]($png)"
		echo
		if [ -f "${png%.png}.md" ]; then
			cat "${png%.png}.md"
			echo
		fi
	done
} >"$raw.md"
mv "$raw.md" "$OUT"
echo "bench: wrote $OUT"
