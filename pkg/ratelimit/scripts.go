package ratelimit

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

// What take.lua answers first, read under the names statusPrelude
// declares.
const (
	takeRefused = 0 // over the budget: nothing spent
	takeAllowed = 1 // spent
)

var statusPrelude = luascript.Prelude{Name: "status", Src: fmt.Sprintf(
	"local TAKE_REFUSED, TAKE_ALLOWED = %d, %d\n", takeRefused, takeAllowed)}

var takeScript = luascript.New(scriptFiles, "scripts/take.lua", statusPrelude, luascript.NowMs)

// scripts is every script above, for TestScripts.
var scripts = []*luascript.Script{takeScript}
