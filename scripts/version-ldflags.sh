#!/usr/bin/env bash
# Prints the -ldflags that stamp the VCS revision into pkg/version, for
# builds where Go cannot stamp it itself: a git worktree (its .git is a
# file), GOFLAGS=-buildvcs=false. make build and make image pass them.
# Where Go does stamp it, its own values win. Prints nothing outside git.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$(git rev-parse HEAD 2>/dev/null) || exit 0
# As Go stamps vcs.time: the commit time in UTC, RFC 3339.
at=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ)
modified=false
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then modified=true; fi
pkg=github.com/headcount/headcount/pkg/version
echo "-X $pkg.revision=$rev -X $pkg.time=$at -X $pkg.modified=$modified"
