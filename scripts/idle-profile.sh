#!/usr/bin/env bash
# idle-profile.sh: where an idle socket's memory goes in a wsnode.
#
# Starts redis-server and bin/wsnode on loopback, holds IDLE_SOCKETS (10000)
# idle subscribed sockets on it with hcload (4 source addresses), then
# prints the wsnode's growth per socket (RSS, and the runtime's MemStats
# read right after a GC) and saves a heap profile and a goroutine dump in
# IDLE_OUT (.run/idle-profile). Everything stops by itself; the wsnode and
# redis-server are stopped on exit.
#
#   IDLE_UNSAMPLED=1   profile every allocation (GODEBUG=memprofilerate=1):
#                      exact bytes per site, at some RSS cost of its own
#   IDLE_WSNODE=path   another wsnode binary (default: build bin/wsnode)
#   IDLE_PORT_BASE     first of the three loopback ports used (16390)
#
# Read the profile: go tool pprof -sample_index=inuse_space -top bin/wsnode .run/idle-profile/heap.pb.gz
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SOCKETS=${IDLE_SOCKETS:-10000}
OUT=${IDLE_OUT:-.run/idle-profile}
BASE=${IDLE_PORT_BASE:-16390}
REDIS_PORT=$BASE WS_PORT=$((BASE + 1)) ADMIN_PORT=$((BASE + 2))
ADMIN=127.0.0.1:$ADMIN_PORT
mkdir -p "$OUT"
ulimit -n $((SOCKETS * 2 + 1000)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"

WSNODE=${IDLE_WSNODE:-}
if [ -z "$WSNODE" ]; then
	go build -o bin/ ./cmd/wsnode ./cmd/hcload
	WSNODE=bin/wsnode
else
	go build -o bin/ ./cmd/hcload
fi
env=()
[ "${IDLE_UNSAMPLED:-0}" = 1 ] && env=(GODEBUG=memprofilerate=1)

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

timeout 600 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$OUT/redis.log" 2>&1 &
pids+=($!)
sleep 0.5
env "${env[@]}" timeout 600 "$WSNODE" --redis "redis://127.0.0.1:$REDIS_PORT/0" --addr "127.0.0.1:$WS_PORT" \
	--admin-addr "$ADMIN" --node-id idle-profile --max-sockets $((SOCKETS + 1000)) >"$OUT/wsnode.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://$ADMIN/readyz" >/dev/null && break; sleep 0.2; done
pid=$(pgrep -P "${pids[-1]}") # timeout's child: the node (its exit anchor has the same command line)

memstats() { curl -s "http://$ADMIN/debug/pprof/heap?gc=1&debug=1" | grep '^# '; }
rss() { awk '/^VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }
open() { curl -s "http://$ADMIN/metrics" | awk '/^headcount_wsnode_connections_open / {print $2}'; }

sleep 2
memstats >"$OUT/memstats0.txt"
rss0=$(rss)
timeout 300 bin/hcload --ws "127.0.0.1:$WS_PORT" --api "" --sockets "$SOCKETS" --hold 60s --source-ips 4 --quiet \
	>"$OUT/hcload.json" 2>&1 &
pids+=($!)
for _ in $(seq 120); do [ "$(open)" = "$SOCKETS" ] && break; sleep 1; done
[ "$(open)" = "$SOCKETS" ] || { echo "idle-profile: only $(open) of $SOCKETS sockets open" >&2; exit 1; }
sleep 10 # let the runtime settle
memstats >"$OUT/memstats1.txt"
curl -s "http://$ADMIN/debug/pprof/heap?gc=1" >"$OUT/heap.pb.gz"
curl -s "http://$ADMIN/debug/pprof/goroutine?debug=1" >"$OUT/goroutine.txt"
sleep 3
rss1=$(rss)

# Per socket: the difference between the two MemStats (each read after a
# GC), divided by the sockets.
awk -v n="$SOCKETS" -v rss0="$rss0" -v rss1="$rss1" '
	function val(s) { sub(/.*= */, "", s); split(s, a, " "); return a[1] }
	FNR == NR { v0[$2] = val($0); next }
	{ v1[$2] = val($0) }
	END {
		printf "bytes per idle socket, %d sockets\n", n
		printf "  %-48s %7.0f\n", "RSS growth", (rss1 - rss0) / n
		printf "  %-48s %7.0f\n", "goroutine stacks (Stack)", (v1["Stack"] - v0["Stack"]) / n
		printf "  %-48s %7.0f\n", "live heap (HeapAlloc)", (v1["HeapAlloc"] - v0["HeapAlloc"]) / n
		printf "  %-48s %7.0f\n", "free slots in used spans (HeapInuse-HeapAlloc)", (v1["HeapInuse"] - v1["HeapAlloc"] - v0["HeapInuse"] + v0["HeapAlloc"]) / n
		printf "  %-48s %7.0f\n", "free spans kept (HeapIdle-HeapReleased)", (v1["HeapIdle"] - v1["HeapReleased"] - v0["HeapIdle"] + v0["HeapReleased"]) / n
		printf "  %-48s %7.0f\n", "off-heap runtime (OtherSys)", (v1["OtherSys"] - v0["OtherSys"]) / n
		printf "  %-48s %7.0f\n", "GC metadata and spans (GCSys+MSpan)", (v1["GCSys"] + v1["MSpan"] - v0["GCSys"] - v0["MSpan"]) / n
		printf "  %-48s %7.2f\n", "heap objects", (v1["HeapObjects"] - v0["HeapObjects"]) / n
	}' "$OUT/memstats0.txt" "$OUT/memstats1.txt"
echo "profiles in $OUT: heap.pb.gz, goroutine.txt"
