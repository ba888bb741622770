package admission

import (
	"testing"

	"github.com/headcount/headcount/pkg/luascript"
)

// TestScripts: every script's preludes declare what it reads, its header
// names them, every file under scripts/ is built from, and each status
// the scripts answers is distinct and read in Lua under its name with Go's
// value (luascript.Test).
func TestScripts(t *testing.T) {
	luascript.Test(t, scriptFiles, scripts, map[string]any{"UNLIMITED": statusUnlimited, "ADMITTED": statusAdmitted, "ADMITTED_NOW": statusAdmittedNow, "WAITING": statusWaiting, "JOIN_FULL": joinFull, "JOIN_INCOMPLETE": joinIncomplete, "LEFT_NONE": leftNone, "LEFT_KEPT": leftKept}, statusPrelude)
}
