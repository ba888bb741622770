package luascript

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/headcount/headcount/internal/redistest"
)

func TestCheckFindsFreeNames(t *testing.T) {
	fsys := fstest.MapFS{
		"scripts/lib.lua": {Data: []byte("-- lib.lua\n-- KEYS: none. ARGV: none.\n-- uses: now_ms\nlocal function helper(a) return now_ms() + a end\nlocal T = {x = 1}\nfunction T.f(b) return self end\n")},
		"scripts/main.lua": {Data: []byte(`-- main.lua
-- KEYS: 1 the key. ARGV: none.
-- uses: now_ms, lib
local s = 'missing_in_string' -- missing_in_comment
--[[ missing_in_block ]]
local t = {k = v, [[missing_in_long]]}
for i, x in ipairs(KEYS) do s = s .. x .. i end
return {helper(1), T.x, string.len(s), missing(2), t.k}
`)},
		"scripts/orphan.lua": {Data: []byte("return 1\n")},
	}
	lib := FilePrelude(fsys, "lib", "scripts/lib.lua", "")
	good := New(fsys, "scripts/main.lua", NowMs, lib)
	require.Equal(t, []string{
		"main.lua uses v, which none of its preludes (now_ms, lib) declares",
		"main.lua uses missing, which none of its preludes (now_ms, lib) declares",
		"scripts/orphan.lua is in no entry of the table of scripts",
	}, Check(fsys, "scripts", []*Script{good}))

	// A prelude reads only what the preludes before it declare, and the
	// header names the preludes as the table does.
	swapped := New(fsys, "scripts/main.lua", lib)
	require.Equal(t, []string{
		"main.lua: prelude lib uses now_ms, which no prelude before it () declares",
		"main.lua uses v, which none of its preludes (lib) declares",
		"main.lua uses missing, which none of its preludes (lib) declares",
		`main.lua: its header says it uses "now_ms, lib", its table entry "lib"`,
		"main.lua: prelude lib uses now_ms, which it does not follow",
		"scripts/orphan.lua is in no entry of the table of scripts",
	}, Check(fsys, "scripts", []*Script{swapped}))
}

func TestConsts(t *testing.T) {
	require.Equal(t, map[string]string{"A": "1", "B": "-2", "C": "u"},
		Consts("local A, B = 1, -2\nlocal C = 'u'\nlocal x = 3\n  local D = 4\n"))
}

// TestNowMs: now_ms is Redis's TIME in unix ms, by the server's clock.
func TestNowMs(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	before := time.Now().UnixMilli()
	got, err := rdb.Eval(context.Background(), NowMs.Src+"return now_ms()", nil).Int64()
	require.NoError(t, err)
	// The server runs on this machine's clock: between the two readings,
	// give or take the ms now_ms rounds down.
	require.GreaterOrEqual(t, got, before-1)
	require.LessOrEqual(t, got, time.Now().UnixMilli())
}

func TestStatuses(t *testing.T) {
	status := Prelude{Name: "status", Src: "local OK, NO, EXTRA = 1, 'n', 1\n"}
	other := Prelude{Name: "other", Src: "local REAPS, PREFIX = -4, 'r'\n"}
	require.Equal(t, []string{
		"no prelude declares GONE",
		"Lua declares NO = n, Go x",
		"Lua declares REAPS = -4, Go 1",
		"OK and REAPS are both 1",
		"prelude status declares EXTRA, which Go does not",
	}, Statuses(map[string]any{"OK": 1, "NO": "x", "REAPS": 1, "GONE": 2}, status, other))
	require.Empty(t, Statuses(map[string]any{"OK": 1, "NO": "n", "EXTRA": 2, "REAPS": -4}, Prelude{Src: "local OK, NO, EXTRA = 1, 'n', 2\n"}, other))
}
