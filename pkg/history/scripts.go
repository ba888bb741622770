package history

import (
	"embed"

	"github.com/headcount/headcount/pkg/luascript"
)

// The table of this package's scripts: each is its file under scripts/
// prepended with the preludes named, in order, and nothing else
// (luascript). Its header says the same on its "uses:" line, and
// TestScripts checks that its preludes declare every name it reads.

//go:embed scripts/*.lua
var scriptFiles embed.FS

var prelude = luascript.FilePrelude(scriptFiles, "history", "scripts/lib.lua", "")

var (
	// publishScript runs in a pipeline too (PublishBatch): EVALSHA, then
	// EVAL for those that answered NOSCRIPT, which never ran.
	publishScript = luascript.New(scriptFiles, "scripts/publish.lua", luascript.NowMs, prelude)
	sinceScript   = luascript.New(scriptFiles, "scripts/since.lua", luascript.StreamIDs)
	evictScript   = luascript.New(scriptFiles, "scripts/evict.lua", prelude)
)

// scripts is every script above, for TestScripts.
var scripts = []*luascript.Script{publishScript, sinceScript, evictScript}
