package admission

import (
	"embed"
	"fmt"

	"github.com/headcount/headcount/pkg/apps"
	"github.com/headcount/headcount/pkg/counts"
	"github.com/headcount/headcount/pkg/luascript"
)

// The table of this package's scripts: each is its file under scripts/
// prepended with the preludes named, in order, and nothing else
// (luascript). Its header says the same on its "uses:" line, and
// TestScripts checks that its preludes declare every name it reads.

//go:embed scripts/*.lua
var scriptFiles embed.FS

// What the scripts answer, read under the names statusPrelude declares.
const (
	// check.lua's first value.
	statusUnlimited   = "u" // no waiting list: the member limit alone, or none
	statusAdmitted    = "a" // holds a slot (also waiters.lua's state prefix)
	statusAdmittedNow = "A" // admitted by this call, without waiting
	statusWaiting     = "w" // on the list
	// join.lua's last value when the user may not join.
	joinFull       = -1 // a channel without a list is full
	joinIncomplete = -2 // the members may not hold every live node's yet
	// left.lua's answer.
	leftNone = 0 // no slot held
	leftKept = 1 // the slot is kept for the grace
)

var (
	statusPrelude = luascript.Prelude{Name: "status", Src: fmt.Sprintf(
		"local UNLIMITED, ADMITTED, ADMITTED_NOW, WAITING, JOIN_FULL, JOIN_INCOMPLETE, LEFT_NONE, LEFT_KEPT = %q, %q, %q, %q, %d, %d, %d, %d\n",
		statusUnlimited, statusAdmitted, statusAdmittedNow, statusWaiting, joinFull, joinIncomplete, leftNone, leftKept)}
	// lib reads members as counts does (counts.ExactPrelude), and
	// apps.MaxCapacity as MAX_CAPACITY.
	libPrelude = luascript.FilePrelude(scriptFiles, "lib", "scripts/lib.lua",
		fmt.Sprintf("local MAX_CAPACITY = %d\n", apps.MaxCapacity))
)

var (
	checkScript   = script("check.lua")
	leaveScript   = script("leave.lua")
	stateScript   = script("state.lua")
	joinScript    = script("join.lua")
	leftScript    = script("left.lua")
	waitersScript = script("waiters.lua")
)

// scripts is every script above, for TestScripts.
var scripts = []*luascript.Script{checkScript, leaveScript, stateScript, joinScript, leftScript, waitersScript}

// script builds file on what every admission script starts with.
func script(file string) *luascript.Script {
	return luascript.New(scriptFiles, "scripts/"+file, counts.ExactPrelude, luascript.NowMs, statusPrelude, libPrelude)
}
