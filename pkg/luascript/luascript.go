package luascript

import (
	_ "embed"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Prelude is Lua prepended to scripts: the names it declares are theirs
// to use.
type Prelude struct {
	// Name is how script headers name it ("-- uses: ...").
	Name string
	// File is the file under scripts/ it holds, "" when it is made in Go
	// alone (constants).
	File string
	// Src is its Lua.
	Src string
	// body is its file's Lua, the end of Src.
	body string
}

//go:embed now_ms.lua
var nowMsSrc string

// NowMs declares now_ms(): the shard's clock in unix ms.
var NowMs = Prelude{Name: "now_ms", Src: nowMsSrc}

//go:embed stream_ids.lua
var streamIDsSrc string

// StreamIDs declares stream_id_after(a, b): whether stream id a comes
// after b.
var StreamIDs = Prelude{Name: "stream_ids", Src: streamIDsSrc}

// FilePrelude is a prelude made of the file at name in fsys, after head
// (Lua made in Go that the file reads, or "").
func FilePrelude(fsys fs.FS, name, file, head string) Prelude {
	body := read(fsys, file)
	return Prelude{Name: name, File: path.Base(file), Src: head + body, body: body}
}

// Script is one entry of a package's table of scripts: its file and its
// preludes, and the *redis.Script built from them.
type Script struct {
	*redis.Script
	// Name is its file's name without ".lua".
	Name string
	// File is its file under scripts/.
	File     string
	Preludes []Prelude
	// Body is its file's Lua.
	Body string
	src  string
}

// New builds the script at file in fsys prepended with preludes, in
// order. It panics if the file is missing: the table names files embedded
// with it, so that is a typo every test meets at init.
func New(fsys fs.FS, file string, preludes ...Prelude) *Script {
	s := &Script{Name: strings.TrimSuffix(path.Base(file), ".lua"), File: path.Base(file), Preludes: preludes, Body: read(fsys, file)}
	var b strings.Builder
	for _, p := range preludes {
		b.WriteString(p.Src)
	}
	b.WriteString(s.Body)
	s.src = b.String()
	s.Script = redis.NewScript(s.src)
	return s
}

// Source is what Redis runs: the preludes' Lua, then the script's. For
// EVAL where EVALSHA cannot be retried (inside MULTI).
func (s *Script) Source() string { return s.src }

func read(fsys fs.FS, file string) string {
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		panic(fmt.Sprintf("luascript: %v", err))
	}
	return string(b)
}
