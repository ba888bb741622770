#!/usr/bin/env bash
# run-apps.sh: prints the apps file make run (scripts/run-local.sh) uses: the
# default app (HEADCOUNT_APP_ID/_KEY/_SECRET, else app-id/app-key/app-secret)
# with client events and subscription_count on, so every feature README's
# Architecture lists works in the demo, and a capacity of RUN_ROOM_CAPACITY
# (2) on presence-room- channels, so the demo room has a waiting list from
# the third visitor on. A separate script so a test can read what it writes.
set -euo pipefail

# json_str VALUE: VALUE as a JSON string.
json_str() {
	local v=${1//\\/\\\\}
	v=${v//\"/\\\"}
	printf '"%s"' "$v"
}

capacity=${RUN_ROOM_CAPACITY:-2}
case $capacity in '' | *[!0-9]*)
	printf 'run-apps: RUN_ROOM_CAPACITY must be a positive integer, not %s\n' "$capacity" >&2
	exit 2
	;;
esac
printf '[{"id": %s, "key": %s, "secret": %s, "enableClientMessages": true, "enableSubscriptionCount": true, "capacities": [{"prefix": "presence-room-", "capacity": %s}]}]\n' \
	"$(json_str "${HEADCOUNT_APP_ID:-app-id}")" "$(json_str "${HEADCOUNT_APP_KEY:-app-key}")" "$(json_str "${HEADCOUNT_APP_SECRET:-app-secret}")" "$capacity"
