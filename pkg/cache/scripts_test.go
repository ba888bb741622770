package cache

import (
	"testing"

	"github.com/headcount/headcount/pkg/luascript"
)

// TestScripts: every script's preludes declare what it reads, its header
// names them, every file under scripts/ is built from, and each status
// fetch.lua answers is distinct and read in Lua under its name with Go's
// value (luascript.Test).
func TestScripts(t *testing.T) {
	luascript.Test(t, scriptFiles, scripts, map[string]any{"FETCH_MISS": fetchMiss, "FETCH_REPORT": fetchReport}, statusPrelude)
}
