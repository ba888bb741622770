package counts

import (
	"embed"
	"fmt"

	"github.com/headcount/headcount/pkg/eventlog"
	"github.com/headcount/headcount/pkg/luascript"
)

// The table of this package's scripts: each is its file under scripts/
// prepended with the preludes named, in order, and nothing else
// (luascript). Its header says the same on its "uses:" line, and
// TestScripts checks that its preludes declare every name it reads.

//go:embed scripts/*.lua
var scriptFiles embed.FS

// The preludes.
var (
	// statusPrelude declares the statuses (keys.go) to the scripts that
	// answer with them.
	statusPrelude = luascript.Prelude{Name: "status", Src: fmt.Sprintf(
		"local STATUS_APPLIED, STATUS_UNREGISTERED, STATUS_NEGATIVE, STATUS_UNDECLARED, STATUS_SPARED, STATUS_EXPIRED = %d, %d, %d, %d, %d, %d\n",
		statusApplied, statusUnregistered, statusNegative, statusUndeclared, statusSpared, statusExpired)}
	// flightPrelude declares flight.lua's answers (shared_listing.go).
	flightPrelude = luascript.Prelude{Name: "flight", Src: fmt.Sprintf(
		"local FLIGHT_WAIT, FLIGHT_CACHED, FLIGHT_COMPUTE = %d, %d, %d\n", flightWait, flightCached, flightCompute)}
	libPrelude     = luascript.FilePrelude(scriptFiles, "lib", "scripts/lib.lua", "")
	sourcesPrelude = luascript.FilePrelude(scriptFiles, "sources", "scripts/sources.lua", "")
	freshPrelude   = luascript.FilePrelude(scriptFiles, "fresh", "scripts/freshlib.lua", "")

	// ExactPrelude is exactlib.lua with what it reads from Go (exact.go).
	// It is exported for the scripts of packages that read counts' keys in
	// their own unit (admission's gate): prepended, with ReapKeys declared
	// after the script's own keys and the script run through Exactly.
	ExactPrelude = luascript.FilePrelude(scriptFiles, "exact", "scripts/exactlib.lua", fmt.Sprintf(
		"local STATUS_REAPS, RETIRE_PREFIX, REAP_WINDOW, TOP_WINDOW = %d, %q, %d, %d\n",
		statusReaps, retirePrefix, reapWindow, topWindow))
)

// The scripts. The count scripts log their edges in their own unit, with
// the event log's prelude.
var (
	applyScript     = script("apply.lua", statusPrelude, luascript.NowMs, eventlog.Prelude, libPrelude)
	reapScript      = script("reap.lua", statusPrelude, luascript.NowMs, eventlog.Prelude)
	reapSliceScript = script("reap_slice.lua", statusPrelude, luascript.NowMs, eventlog.Prelude, libPrelude)
	staleScript     = script("stale.lua", luascript.NowMs)
	// The audit's scripts are run with Run (EVALSHA, EVAL on NOSCRIPT), never
	// in a pipeline, so loadScripts need not load them.
	auditScript  = script("audit.lua", statusPrelude, sourcesPrelude)
	repairScript = script("repair.lua", statusPrelude, sourcesPrelude)
	// The node-level liveness scripts: nodeSeen runs with EVAL in the
	// recorder's pipeline (it is short, and EVAL never meets NOSCRIPT, so a
	// fresh liveness shard cannot fail a flush), the others with Run.
	nodeSeenScript   = script("nodeseen.lua", luascript.NowMs)
	candidatesScript = script("candidates.lua", luascript.NowMs)
	forgetScript     = script("forget.lua")
	watchNodesScript = script("watchnodes.lua")

	// Listings' reads. fresh and page run with EVAL inside a MULTI.
	channelScript     = script("channel.lua", luascript.NowMs, freshPrelude, ExactPrelude)
	topScript         = script("top.lua", luascript.NowMs, freshPrelude, ExactPrelude)
	freshScript       = script("fresh.lua", luascript.NowMs, freshPrelude)
	pageScript        = script("page.lua", statusPrelude, ExactPrelude)
	flightScript      = script("flight.lua", flightPrelude, luascript.NowMs)
	flightDoneScript  = script("flight_done.lua")
	flightRenewScript = script("flight_renew.lua")

	// Store's reads.
	countsScript  = script("counts.lua", ExactPrelude)
	scanScript    = script("scan.lua", ExactPrelude)
	membersScript = script("members.lua", ExactPrelude)
	usersScript   = script("users.lua", ExactPrelude)
	connsScript   = script("conns.lua", ExactPrelude)
	loadScript    = script("load.lua", ExactPrelude)
)

// scripts is every script above, for TestScripts.
var scripts = []*luascript.Script{
	applyScript, reapScript, reapSliceScript, staleScript, auditScript, repairScript,
	nodeSeenScript, candidatesScript, forgetScript, watchNodesScript,
	channelScript, topScript, freshScript, pageScript, flightScript, flightDoneScript, flightRenewScript,
	countsScript, scanScript, membersScript, usersScript, connsScript, loadScript,
}

func script(file string, preludes ...luascript.Prelude) *luascript.Script {
	return luascript.New(scriptFiles, "scripts/"+file, preludes...)
}
