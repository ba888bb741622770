package cache

import (
	"embed"
	"fmt"

	"github.com/headcount/headcount/pkg/luascript"
)

// The table of this package's scripts: each is its file under scripts/
// prepended with the preludes named, in order, and nothing else
// (luascript). Its header says the same on its "uses:" line, and
// TestScripts checks that its preludes declare every name it reads.

//go:embed scripts/*.lua
var scriptFiles embed.FS

// What fetch.lua answers on a miss, read under the names statusPrelude
// declares.
const (
	fetchMiss   = 0 // a miss, not to report
	fetchReport = 1 // a miss, the one to report to the webhook
)

var statusPrelude = luascript.Prelude{Name: "status", Src: fmt.Sprintf(
	"local FETCH_MISS, FETCH_REPORT = %d, %d\n", fetchMiss, fetchReport)}

var fetchScript = luascript.New(scriptFiles, "scripts/fetch.lua", statusPrelude)

// scripts is every script above, for TestScripts.
var scripts = []*luascript.Script{fetchScript}
