package eventlog

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

// What tell.lua answers, read under the names tellPrelude declares.
const (
	tellNothing = 0 // nothing to tell, or the notice does not fit
	tellLogged  = 1 // the notice was logged
)

var (
	// Prelude (scripts/lib.lua) is what a script prepends, after
	// luascript.NowMs, to append to a log itself: log_spec, log_open,
	// log_add, log_mark. The script declares the log's Key and IndexKey in
	// KEYS and takes a Spec's Arg in ARGV.
	Prelude = luascript.FilePrelude(scriptFiles, "eventlog", "scripts/lib.lua", "")

	tellPrelude = luascript.Prelude{Name: "status", Src: fmt.Sprintf("local TELL_NOTHING, TELL_LOGGED = %d, %d\n", tellNothing, tellLogged)}
)

// Run with Run (EVALSHA, EVAL on NOSCRIPT), never in a pipeline.
var (
	appendScript = script("append.lua", luascript.NowMs, Prelude)
	bytesScript  = script("bytes.lua", Prelude)
	claimScript  = script("claim.lua", luascript.NowMs, Prelude)
	sweepScript  = script("sweep.lua", Prelude)
	tellScript   = script("tell.lua", tellPrelude, luascript.NowMs, Prelude)
)

// scripts is every script above, for TestScripts.
var scripts = []*luascript.Script{appendScript, bytesScript, claimScript, sweepScript, tellScript}

func script(file string, preludes ...luascript.Prelude) *luascript.Script {
	return luascript.New(scriptFiles, "scripts/"+file, preludes...)
}
