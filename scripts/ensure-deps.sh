#!/usr/bin/env bash
# ensure-deps.sh: make sure what the tests and `make run` need is installed.
#
#   - redis-server, redis-cli and redis-sentinel (the tests start their own
#     servers and sentinels on free loopback ports; a system redis is not
#     used and is not left running);
#   - node and npm, and test/compat/node_modules when test/compat/package.json
#     exists (real pusher-js / pusher SDK clients for the end-to-end tests);
#   - chromium and chromium-driver (Debian's packages, at /usr/bin/chromium)
#     for the browser test of the dashboard and demo room, which drives it
#     with playwright-core (never a downloaded browser);
#   - postgresql and mariadb-server, for the tests of apps read from a
#     database table (pkg/appsdb: they start private servers on loopback;
#     no system service is left running). `make run` does not need them;
#   - prometheus (Debian's package: promtool and the server), for the tests
#     of the alerting rules in deploy/prometheus and deploy/k8s/validate (the
#     chart's), and the end-to-end test that runs a real Prometheus (no
#     system service is left running).
#   - prometheus-redis-exporter (Debian's redis_exporter), for the tests
#     that the dashboard's Redis row and the Redis alert read metrics it
#     exposes (no system service is left running).
#
# `ensure-deps.sh run` (what `make run` calls) installs only what the local
# cluster runs: redis-server. `ensure-deps.sh image` (make image and its
# tests) installs only ca-certificates, whose bundle the image ships. The README's node test/compat/... steps say
# what they need when they are reached (`make deps`).
#
# Idempotent and quiet: prints one line per thing it does, nothing when all is
# there. Installs with apt-get when running as root on Debian/Ubuntu (not with
# ENSURE_DEPS_NO_INSTALL=1, for tests of this script); otherwise says exactly
# what to install and exits 1.
set -euo pipefail
mode=${1:-test}
case $mode in
test | run | image) ;;
*)
	echo "usage: ensure-deps.sh [test|run|image]   (default test: everything the tests need; run: what make run runs; image: what make image ships)" >&2
	exit 2
	;;
esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'ensure-deps: %s\n' "$*"; }
die() {
	printf 'ensure-deps: %s\n' "$*" >&2
	exit 1
}

can_apt() { [ "${ENSURE_DEPS_NO_INSTALL:-}" != 1 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }

apt_updated=0
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	if [ "$apt_updated" -eq 0 ]; then
		say "apt-get update"
		apt-get update -qq >/dev/null || die "apt-get update failed"
		apt_updated=1
	fi
	say "apt-get install -y $*"
	apt-get install -y -qq --no-install-recommends "$@" >/dev/null || die "apt-get install $* failed"
}

# apt_install_no_start installs packages whose install would start a system
# service (a redis on 6379, a PostgreSQL on 5432): a policy-rc.d that
# refuses service starts, only for the duration of the install.
apt_install_no_start() {
	# Globals, not locals: the EXIT trap may run after the function returned.
	policy=/usr/sbin/policy-rc.d
	added_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		added_policy=1
	fi
	trap '[ "$added_policy" -eq 1 ] && rm -f "$policy"' EXIT
	apt_install "$@"
	if [ "$added_policy" -eq 1 ]; then
		rm -f "$policy"
		added_policy=0
	fi
	trap - EXIT
}

# --- ca-certificates (make image copies /etc/ssl/certs/ca-certificates.crt) ---
if [ "$mode" = image ]; then
	ca=/etc/ssl/certs/ca-certificates.crt
	if [ ! -s "$ca" ]; then
		if can_apt; then
			apt_install ca-certificates
			[ -s "$ca" ] || die "$ca still missing after installing ca-certificates"
		else
			die "$ca is needed: the image ships it for TLS to Redis and webhooks.
  Debian/Ubuntu: sudo apt-get install ca-certificates
  (or run this as root on Debian/Ubuntu and it installs it with apt-get)"
		fi
	fi
	exit 0
fi

# --- redis-server, redis-cli, redis-sentinel ---------------------------------
# The Sentinel tests run redis-sentinel (Debian packages it apart from
# redis-server); they fall back to `redis-server --sentinel` without it.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 ||
	! command -v redis-sentinel >/dev/null 2>&1; then
	if can_apt; then
		# Keep the packages from starting a system redis on 6379 or a
		# sentinel on 26379.
		apt_install_no_start redis-server redis-tools redis-sentinel
		# If a service manager started them anyway, stop and disable them.
		for svc in redis-server redis-sentinel; do
			if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
				systemctl disable --now "$svc" >/dev/null 2>&1 || true
			elif command -v service >/dev/null 2>&1; then
				service "$svc" stop >/dev/null 2>&1 || true
			fi
		done
		command -v redis-server >/dev/null 2>&1 || die "redis-server still not on PATH after installing it"
		command -v redis-sentinel >/dev/null 2>&1 || die "redis-sentinel still not on PATH after installing it"
	elif command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
		# Only redis-sentinel is missing: the tests use redis-server --sentinel.
		say "redis-sentinel is missing; the Sentinel tests use redis-server --sentinel instead (Debian/Ubuntu: sudo apt-get install redis-sentinel)"
	else
		die "redis-server and redis-cli are needed (the tests start their own on loopback).
  Install them, then re-run:
    Debian/Ubuntu: sudo apt-get install redis-server redis-sentinel
    Fedora:        sudo dnf install redis
    macOS:         brew install redis
  (or run this as root on Debian/Ubuntu and it installs them with apt-get)"
	fi
fi

if [ "$mode" = run ]; then
	exit 0
fi

# --- node, npm and test/compat/node_modules ----------------------------------
compat=test/compat
if [ -f "$compat/package.json" ]; then
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		if can_apt; then
			apt_install nodejs npm
		else
			die "node and npm are needed for the end-to-end tests ($compat uses pusher-js).
  Install Node.js 20 or later with npm (playwright-core needs 20), then re-run:
    Debian/Ubuntu: sudo apt-get install nodejs npm
    macOS:         brew install node
  (or run this as root on Debian/Ubuntu and it installs them with apt-get)"
		fi
	fi

	# npm records the installed tree in node_modules/.package-lock.json; install
	# again when it is missing or older than package.json or package-lock.json.
	marker=$compat/node_modules/.package-lock.json
	stale=0
	if [ ! -f "$marker" ]; then
		stale=1
	elif [ "$compat/package.json" -nt "$marker" ]; then
		stale=1
	elif [ -f "$compat/package-lock.json" ] && [ "$compat/package-lock.json" -nt "$marker" ]; then
		stale=1
	fi
	if [ "$stale" -eq 1 ]; then
		npm_flags=(--no-audit --no-fund --loglevel=error)
		if [ -f "$compat/package-lock.json" ]; then
			say "npm ci in $compat"
			(cd "$compat" && npm ci "${npm_flags[@]}" >/dev/null) || die "npm ci in $compat failed"
		else
			say "npm install in $compat (no package-lock.json)"
			(cd "$compat" && npm install "${npm_flags[@]}" >/dev/null) || die "npm install in $compat failed"
		fi
		# npm ci may keep the lock's mtime newer than the marker's on coarse
		# clocks; touch the marker so the next run is a no-op.
		if [ -f "$marker" ]; then touch "$marker"; fi
	fi
fi

# --- postgresql and mariadb-server (pkg/appsdb's tests) ----------------------
# Only pkg/appsdb's tests need them (internal/dbtest starts its own
# servers), so, as for chromium, one that cannot be installed is a warning:
# `make run` works without them, and the tests fail under CI saying what to
# install (elsewhere they skip).
db_missing=()
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then db_missing+=(postgresql); fi
if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then db_missing+=(mariadb-server); fi
if [ "${#db_missing[@]}" -gt 0 ]; then
	if can_apt; then
		# Both packages start a system server on install.
		apt_install_no_start "${db_missing[@]}"
		for svc in postgresql mariadb; do
			if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
				systemctl disable --now "$svc" >/dev/null 2>&1 || true
			elif command -v service >/dev/null 2>&1; then
				service "$svc" stop >/dev/null 2>&1 || true
			fi
		done
	else
		say "WARNING: ${db_missing[*]} missing, so pkg/appsdb's tests skip (and fail under CI).
  Debian/Ubuntu: sudo apt-get install postgresql mariadb-server
  (or run this script as root on Debian and it installs them with apt-get)" >&2
	fi
fi

# --- prometheus (the alerting rules' tests) ------------------------------------
# deploy/prometheus's tests run promtool, and an end-to-end test runs the
# server; they fail saying what to install when it is missing, so, as for
# chromium, one that cannot be installed is a warning here.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
	if can_apt; then
		# The package starts a system Prometheus on 9090 on install.
		apt_install_no_start prometheus
		if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
			systemctl disable --now prometheus >/dev/null 2>&1 || true
		elif command -v service >/dev/null 2>&1; then
			service prometheus stop >/dev/null 2>&1 || true
		fi
		command -v promtool >/dev/null 2>&1 || die "promtool still not on PATH after installing prometheus"
	else
		say "WARNING: promtool or prometheus is missing, so the alerting rules' tests (deploy/prometheus) fail.
  Debian/Ubuntu: sudo apt-get install prometheus
  (or run this script as root on Debian and it installs it with apt-get)" >&2
	fi
fi

# --- prometheus-redis-exporter (the Redis row and alert's metrics) -----------
# deploy/prometheus and test/e2e run it against a private redis-server; like
# prometheus, a warning when it cannot be installed (those tests fail saying
# what to install).
if ! command -v prometheus-redis-exporter >/dev/null 2>&1; then
	if can_apt; then
		# The package starts a system exporter on 9121 on install.
		apt_install_no_start prometheus-redis-exporter
		if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
			systemctl disable --now prometheus-redis-exporter >/dev/null 2>&1 || true
		elif command -v service >/dev/null 2>&1; then
			service prometheus-redis-exporter stop >/dev/null 2>&1 || true
		fi
		command -v prometheus-redis-exporter >/dev/null 2>&1 || die "prometheus-redis-exporter still not on PATH after installing it"
	else
		say "WARNING: prometheus-redis-exporter is missing, so the tests of the Redis row and alert (deploy/prometheus, test/e2e) fail.
  Debian/Ubuntu: sudo apt-get install prometheus-redis-exporter
  (or run this script as root on Debian and it installs it with apt-get)" >&2
	fi
fi

# --- chromium (the browser test, test/e2e/dashboard_test.go) -----------------
# Only the browser test needs it, so when it cannot be installed this warns
# instead of failing: `make run` works without it, and the test itself fails
# saying what to run.
if [ ! -x /usr/bin/chromium ]; then
	if can_apt; then
		apt_install chromium chromium-driver
		[ -x /usr/bin/chromium ] || die "/usr/bin/chromium still missing after installing chromium"
	else
		say "WARNING: /usr/bin/chromium is missing, so the browser test (TestDashboardInBrowser) will fail.
  Install Debian's chromium, then re-run:
    Debian: sudo apt-get install chromium chromium-driver
  (or run this script as root on Debian and it installs them with apt-get)" >&2
	fi
fi
if command -v node >/dev/null 2>&1; then
	node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
	if [ "$node_major" -lt 20 ]; then
		say "WARNING: node $(node --version) is older than 20, which playwright-core (the browser test) needs; install Node.js 20 or later" >&2
	fi
fi
