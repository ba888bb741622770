package cache

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

// TestStatuses: each status fetch.lua answers is distinct, and Lua reads it
// under its name with Go's value.
func TestStatuses(t *testing.T) {
	for _, p := range luascript.Statuses(map[string]any{"FETCH_MISS": fetchMiss, "FETCH_REPORT": fetchReport}, statusPrelude) {
		t.Error(p)
	}
}
