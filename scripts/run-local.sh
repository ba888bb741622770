#!/usr/bin/env bash
# run-local.sh (make run): a local headcount cluster on loopback.
#
#   redis-server  127.0.0.1:$RUN_REDIS_PORT (default 6390), no persistence
#   ws-a          ws://127.0.0.1:6001   admin 127.0.0.1:9601
#   ws-b          ws://127.0.0.1:6002   admin 127.0.0.1:9611
#   cleaner-1     admin 127.0.0.1:9602
#   cleaner-2     admin 127.0.0.1:9612
#   httpapi       http://127.0.0.1:8080 admin 127.0.0.1:9603
#                 with --dashboard: http://127.0.0.1:8080/dashboard and /demo
#
# Each process runs under the name the banner and the dashboard show
# (--node-id). Every process reads the apps file scripts/run-apps.sh writes
# to the run dir (or the one HEADCOUNT_APPS_FILE names): the default app
# with client events and subscription_count on and a capacity of 2 on
# presence-room- channels, so the demo room has a waiting list from the
# third visitor on.
#
# Builds the binaries, installs what is missing of what it runs
# (scripts/ensure-deps.sh run: redis-server, nothing the tests alone need),
# checks the ports are free, starts everything, waits for every /readyz, then
# prints where to connect. Ctrl-C or SIGTERM stops everything (a second
# Ctrl-C kills at once).
#
# Environment: RUN_REDIS_PORT (6390), RUN_DIR (.run), RUN_LOG_LEVEL (info),
# HEADCOUNT_APPS_FILE (use this apps file instead of writing one),
# RUN_QUIET=1 (logs to files only), RUN_READY_SECONDS (30), GO (go).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

GO=${GO:-go}
REDIS_PORT=${RUN_REDIS_PORT:-6390}
RUN_BASE=${RUN_DIR:-.run}
LOG_LEVEL=${RUN_LOG_LEVEL:-info}
QUIET=${RUN_QUIET:-0}
READY_SECONDS=${RUN_READY_SECONDS:-30}
DRAIN=2s          # wsnode drain window on Ctrl-C
DEAD_AFTER=3s     # cleaner defaults, spelled out for the banner
SCAN_INTERVAL=500ms
# httpapi's --stale-after defaults to dead-after, so a node is stale only
# while awaiting the reap; two missed heartbeats (1 s each) let the
# dashboard show a hung node stale for a second before it is reaped.
STALE_AFTER=2s
APP_ID=${HEADCOUNT_APP_ID:-app-id}
APP_KEY=${HEADCOUNT_APP_KEY:-app-key}
APP_SECRET=${HEADCOUNT_APP_SECRET:-app-secret}
export RUN_ROOM_CAPACITY=${RUN_ROOM_CAPACITY:-2} # presence-room- channels: the demo room's waiting list starts at the third visitor

msg() { printf 'run: %s\n' "$*"; }
die() {
	printf 'run: %s\n' "$*" >&2
	exit 1
}

command -v setsid >/dev/null 2>&1 || die "setsid (util-linux) is needed"
command -v timeout >/dev/null 2>&1 || die "timeout (coreutils) is needed"

# --- ports -------------------------------------------------------------------
# name:port for everything we bind.
ports=(
	"redis:$REDIS_PORT"
	"ws-a:6001" "ws-a-admin:9601"
	"ws-b:6002" "ws-b-admin:9611"
	"cleaner-1-admin:9602" "cleaner-2-admin:9612"
	"httpapi:8080" "httpapi-admin:9603"
)
port_taken() { timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null; }
taken=()
for np in "${ports[@]}"; do
	if port_taken "${np##*:}"; then taken+=("127.0.0.1:${np##*:} (for ${np%%:*})"); fi
done
if [ "${#taken[@]}" -gt 0 ]; then
	printf 'run: these ports are already in use:\n' >&2
	printf '  %s\n' "${taken[@]}" >&2
	die "stop what holds them (a previous make run?) and try again; the redis port can be moved with RUN_REDIS_PORT"
fi

# --- dependencies and build --------------------------------------------------
bash scripts/ensure-deps.sh run
msg "building bin/wsnode bin/cleaner bin/httpapi"
"$GO" build -buildvcs=auto -ldflags "$(bash scripts/version-ldflags.sh)" -o bin/ ./cmd/wsnode ./cmd/cleaner ./cmd/httpapi

case $RUN_BASE in /*) ;; *) RUN_BASE=$root/$RUN_BASE ;; esac
run_dir=$RUN_BASE/$(date +%Y%m%d-%H%M%S)
mkdir -p "$run_dir/redis"
ln -sfn "$run_dir" "$RUN_BASE/latest"

# --- process management ------------------------------------------------------
declare -a pids=()
declare -A name_of=()
colors=(36 33 35 32 34 31 96)
ncolor=0

# prefix NAME LOG: copy stdin to LOG, and to the terminal with "NAME | ".
# It ignores INT and TERM so that a Ctrl-C never breaks a service's stdout
# while it drains; it ends at EOF, when the service exits.
prefix() {
	trap '' INT TERM
	local name=$1 log=$2 color=$3 line tag
	if [ -t 1 ]; then tag=$(printf '\033[%sm%-10s|\033[0m' "$color" "$name"); else tag=$(printf '%-10s|' "$name"); fi
	exec 4>>"$log"
	while IFS= read -r line || [ -n "$line" ]; do
		printf '%s\n' "$line" >&4
		[ "$QUIET" = 1 ] || printf '%s %s\n' "$tag" "$line"
	done
}

# start NAME CMD...: run CMD in its own session (so only we signal it) with its
# output prefixed; records the pid.
start() {
	local name=$1
	shift
	local color=${colors[$((ncolor % ${#colors[@]}))]}
	ncolor=$((ncolor + 1))
	setsid "$@" </dev/null > >(prefix "$name" "$run_dir/$name.log" "$color") 2>&1 &
	local pid=$!
	pids+=("$pid")
	name_of[$pid]=$name
}

alive() { kill -0 "$1" 2>/dev/null; }

# stop_all SECONDS PID...: SIGTERM each process group, wait until all exit;
# SIGKILL what is left after SECONDS (or at once on a second Ctrl-C).
stop_all() {
	local secs=$1 p
	shift
	[ "$#" -gt 0 ] || return 0
	for p in "$@"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
	local kill_list="$*"
	setsid bash -c 'sleep "$1"; for p in $2; do kill -KILL -- "-$p" 2>/dev/null || true; done' _ "$secs" "$kill_list" </dev/null >/dev/null 2>&1 &
	local watchdog=$!
	for p in "$@"; do
		# wait returns early when a trap runs; a reaped pid is gone.
		while alive "$p"; do
			if [ "$hurry" -eq 1 ]; then kill -KILL -- "-$p" 2>/dev/null || true; fi
			wait "$p" 2>/dev/null || true
		done
	done
	kill -TERM -- "-$watchdog" 2>/dev/null || true
	wait "$watchdog" 2>/dev/null || true
}

hurry=0
stopping=0
cleanup() {
	local code=${1:-0}
	[ "$stopping" -eq 0 ] || return 0
	stopping=1
	trap 'hurry=1; msg "second signal: killing"' INT TERM
	echo
	if [ "$code" -ne 0 ]; then msg "failed (exit status $code)"; fi
	msg "stopping (Ctrl-C again to kill at once)"
	local services=() redis=() p
	for p in "${pids[@]}"; do
		if [ "${name_of[$p]}" = redis ]; then redis+=("$p"); else services+=("$p"); fi
	done
	# Services first (wsnodes drain and remove their counts), Redis last.
	stop_all 15 "${services[@]}"
	stop_all 5 "${redis[@]}"
	msg "stopped; logs are in ${run_dir#"$root"/}"
	exit "$code"
}
trap 'cleanup 0' INT TERM
trap 'cleanup $?' EXIT

# show_tail NAME: the end of a service's log, for errors.
show_tail() {
	printf '\n--- last lines of %s ---\n' "$run_dir/$1.log" >&2
	tail -n 30 "$run_dir/$1.log" >&2 2>/dev/null || true
	printf -- '---\n' >&2
}

# http_status PORT PATH: the HTTP status code from 127.0.0.1:PORT, or nothing.
http_status() {
	timeout 2 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n" "$2" "$1" >&3
		IFS=" " read -r _ code _ <&3 && printf "%s" "$code"
	' _ "$1" "$2" 2>/dev/null || true
}

# wait_until NAME PID CHECK...: poll CHECK until it succeeds; fail loudly when
# the process dies or READY_SECONDS pass.
wait_until() {
	local name=$1 pid=$2
	shift 2
	local deadline=$((SECONDS + READY_SECONDS))
	until "$@"; do
		if ! alive "$pid"; then
			show_tail "$name"
			die "$name (pid $pid) exited during startup"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			show_tail "$name"
			die "$name (pid $pid) not ready after ${READY_SECONDS}s"
		fi
		sleep 0.2
	done
}
redis_up() { [ "$(timeout 2 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }
ready() { [ "$(http_status "$1" /readyz)" = 200 ]; }

# --- start -------------------------------------------------------------------
msg "logs in ${run_dir#"$root"/}/"
start redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
	--dir "$run_dir/redis" --protected-mode yes --loglevel warning
wait_until redis "${pids[-1]}" redis_up

redis_url=redis://127.0.0.1:$REDIS_PORT/0
if [ -n "${HEADCOUNT_APPS_FILE:-}" ]; then
	apps_file=$HEADCOUNT_APPS_FILE # the caller's own apps file wins, as it did before
	apps_note="(yours: HEADCOUNT_APPS_FILE)"
else
	apps_file=$run_dir/apps.json
	apps_note="(client events, subscription_count, presence-room-* capacity $RUN_ROOM_CAPACITY)"
	( # it holds the secret: readable by us only
		umask 077
		bash scripts/run-apps.sh >"$apps_file"
	)
fi
# The processes read the apps file; beside it they refuse the default
# app's variables, which run-apps.sh has already put into it.
unset HEADCOUNT_APP_ID HEADCOUNT_APP_KEY HEADCOUNT_APP_SECRET
common=(--redis "$redis_url" --redis-cluster= --apps-file "$apps_file" --log-level "$LOG_LEVEL")

start ws-a bin/wsnode "${common[@]}" --node-id ws-a --addr 127.0.0.1:6001 --admin-addr 127.0.0.1:9601 --drain "$DRAIN"
start ws-b bin/wsnode "${common[@]}" --node-id ws-b --addr 127.0.0.1:6002 --admin-addr 127.0.0.1:9611 --drain "$DRAIN"
cleaner_flags=(--dead-after "$DEAD_AFTER" --scan-interval "$SCAN_INTERVAL")
start cleaner-1 bin/cleaner "${common[@]}" --node-id cleaner-1 --admin-addr 127.0.0.1:9602 "${cleaner_flags[@]}"
start cleaner-2 bin/cleaner "${common[@]}" --node-id cleaner-2 --admin-addr 127.0.0.1:9612 "${cleaner_flags[@]}"
start httpapi bin/httpapi "${common[@]}" --addr 127.0.0.1:8080 --admin-addr 127.0.0.1:9603 \
	--dashboard --demo-ws 127.0.0.1:6002 --stale-after "$STALE_AFTER"

pid_of() {
	local p
	for p in "${pids[@]}"; do
		if [ "${name_of[$p]}" = "$1" ]; then echo "$p"; fi
	done
}
for svc in ws-a:9601 ws-b:9611 cleaner-1:9602 cleaner-2:9612 httpapi:9603; do
	wait_until "${svc%%:*}" "$(pid_of "${svc%%:*}")" ready "${svc##*:}"
done

# Only one cleaner holds the lease; the other is ready as a standby.
row() { printf '   %-10s %-40s %-13s pid %s\n' "$1" "$2" "$3" "$4"; }
pid_a=$(pid_of ws-a)
{
	echo
	echo "================================================================================"
	echo " headcount is running on loopback (logs: ${run_dir#"$root"/}/)"
	echo
	row redis "redis://127.0.0.1:$REDIS_PORT/0" "" "$(pid_of redis)"
	row ws-a "ws://127.0.0.1:6001/app/$APP_KEY" "admin :9601" "$pid_a"
	row ws-b "ws://127.0.0.1:6002/app/$APP_KEY" "admin :9611" "$(pid_of ws-b)"
	row cleaner-1 "(one cleaner is active, one standby)" "admin :9602" "$(pid_of cleaner-1)"
	row cleaner-2 "" "admin :9612" "$(pid_of cleaner-2)"
	row httpapi "http://127.0.0.1:8080/apps/$APP_ID" "admin :9603" "$(pid_of httpapi)"
	echo
	echo "   app id: $APP_ID   key: $APP_KEY   secret: $APP_SECRET"
	echo "   apps file: ${apps_file#"$root"/} $apps_note"
	echo
	echo " In a browser:"
	echo "   dashboard  http://127.0.0.1:8080/dashboard   (nodes, cleaner lease, channels, members, waiting lists, audit)"
	echo "   demo room  http://127.0.0.1:8080/demo        (open it in 3 windows: 2 get in, the third waits in line;"
	echo "                                                  its browsers connect to ws-b)"
	echo
	echo " In another terminal:"
	echo "   node test/compat/clients.js --hosts 127.0.0.1:6001,127.0.0.1:6002 --clients 10 --channels demo,news --max-seconds 600"
	echo " and in a third:"
	echo "   node test/compat/counts.js --watch"
	echo " then crash ws-a and watch the counts drop to ws-b's share within half a second"
	echo " (its Redis connection closed; the dashboard shows ws-a reaped):"
	echo "   kill -9 $pid_a"
	echo " A hung node keeps its connection: after kill -STOP the dashboard shows it stale"
	echo " from stale-after $STALE_AFTER and reaped at dead-after $DEAD_AFTER (+ scan-interval $SCAN_INTERVAL)."
	echo " The active cleaner reports headcount_cleaner_active 1 on its /metrics:"
	echo "   for c in cleaner-1:9602 cleaner-2:9612; do echo \"\${c%:*} \$(curl -s 127.0.0.1:\${c#*:}/metrics | grep '^headcount_cleaner_active')\"; done"
	echo
	echo " Ctrl-C stops everything."
	echo "================================================================================"
	echo
}

# --- supervise ---------------------------------------------------------------
# Report exits (a kill -9 from the demo is expected) and keep running until a
# signal, or until every process has exited.
remaining=("${pids[@]}")
while [ "${#remaining[@]}" -gt 0 ]; do
	done_pid=
	status=0
	wait -n -p done_pid "${remaining[@]}" 2>/dev/null || status=$?
	[ -n "$done_pid" ] || continue
	msg "${name_of[$done_pid]} (pid $done_pid) exited with status $status"
	left=()
	for p in "${remaining[@]}"; do [ "$p" = "$done_pid" ] || left+=("$p"); done
	remaining=("${left[@]}")
done
msg "every process has exited"
