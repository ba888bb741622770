package ratelimit

import (
	"testing"

	"github.com/headcount/headcount/internal/luascript"
)

// TestScripts: every script's preludes declare what it reads, its header
// names them, and every file under scripts/ is built from (luascript).
func TestScripts(t *testing.T) {
	for _, p := range luascript.Check(scriptFiles, "scripts", scripts) {
		t.Error(p)
	}
}

// TestStatuses: each status take.lua answers is distinct, and Lua reads it
// under its name with Go's value.
func TestStatuses(t *testing.T) {
	for _, p := range luascript.Statuses(map[string]any{"TAKE_REFUSED": takeRefused, "TAKE_ALLOWED": takeAllowed}, statusPrelude) {
		t.Error(p)
	}
}
