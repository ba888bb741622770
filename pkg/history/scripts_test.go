package history

import (
	"testing"

	"github.com/headcount/headcount/pkg/luascript"
)

// TestScripts: every script's preludes declare what it reads, its header
// names them, and every file under scripts/ is built from (luascript).
func TestScripts(t *testing.T) {
	for _, p := range luascript.Check(scriptFiles, "scripts", scripts) {
		t.Error(p)
	}
}
