package eventlog

import (
	"testing"

	"github.com/headcount/headcount/pkg/luascript"
)

// TestScripts: every script's preludes declare what it reads, its header
// names them, every file under scripts/ is built from, and each status
// tell.lua answers is distinct and read in Lua under its name with Go's
// value (luascript.Test).
func TestScripts(t *testing.T) {
	luascript.Test(t, scriptFiles, scripts, map[string]any{"TELL_NOTHING": tellNothing, "TELL_LOGGED": tellLogged}, tellPrelude)
}
