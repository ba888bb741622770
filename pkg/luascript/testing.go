package luascript

import (
	"io/fs"
	"testing"
)

// Test is a package's whole test of its table: it fails t for each problem
// Check finds in scripts (files under "scripts" in fsys) and Statuses
// finds in goValues against status and others.
func Test(t testing.TB, fsys fs.FS, scripts []*Script, goValues map[string]any, status Prelude, others ...Prelude) {
	t.Helper()
	for _, p := range append(Check(fsys, "scripts", scripts), Statuses(goValues, status, others...)...) {
		t.Error(p)
	}
}
