package luascript

import (
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
)

// builtins are the globals Redis's Lua gives every script.
var builtins = set("redis", "KEYS", "ARGV", "cjson", "cmsgpack", "bit", "struct",
	"string", "table", "math", "os", "tonumber", "tostring", "type", "pairs", "ipairs",
	"unpack", "next", "select", "error", "pcall", "xpcall", "assert", "rawget", "rawset",
	"rawequal", "setmetatable", "getmetatable", "_G")

var keywords = set("and", "break", "do", "else", "elseif", "end", "false", "for",
	"function", "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return",
	"then", "true", "until", "while")

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// Check reports what is wrong with a package's table: scripts (every
// entry) and the files under dir in fsys. See the package doc.
func Check(fsys fs.FS, dir string, scripts []*Script) []string {
	var problems []string
	built := map[string]bool{}
	for _, s := range scripts {
		built[s.File] = true
		known := map[string]bool{}
		var names []string
		for _, p := range s.Preludes {
			if p.File != "" {
				built[p.File] = true
			}
			u := scan(p.Src)
			for _, n := range u.free(known) {
				problems = append(problems, fmt.Sprintf("%s: prelude %s uses %s, which no prelude before it (%s) declares", s.File, p.Name, n, strings.Join(names, ", ")))
			}
			for n := range u.top {
				known[n] = true
			}
			names = append(names, p.Name)
		}
		for _, n := range scan(s.Body).free(known) {
			problems = append(problems, fmt.Sprintf("%s uses %s, which none of its preludes (%s) declares", s.File, n, strings.Join(names, ", ")))
		}
		problems = append(problems, header(s.File, s.Body, names)...)
		for i, p := range s.Preludes {
			if p.File != "" {
				problems = append(problems, preludeHeader(s, p, names[:i], !built[p.File+" header"])...)
				built[p.File+" header"] = true
			}
		}
	}
	files, err := fs.Glob(fsys, path.Join(dir, "*.lua"))
	if err != nil {
		return append(problems, err.Error())
	}
	for _, f := range files {
		if !built[path.Base(f)] {
			problems = append(problems, fmt.Sprintf("%s is in no entry of the table of scripts", f))
		}
	}
	return problems
}

// header checks that a script's opening comment states its KEYS, ARGV
// and, on a "uses:" line, its preludes in order ("none" for none).
func header(file, body string, preludes []string) []string {
	text, uses, ok := head(body)
	var problems []string
	for _, w := range []string{"KEYS", "ARGV"} {
		if !strings.Contains(text, w) {
			problems = append(problems, fmt.Sprintf("%s: its header does not state its %s", file, w))
		}
	}
	want := "none"
	if len(preludes) > 0 {
		want = strings.Join(preludes, ", ")
	}
	switch {
	case !ok:
		problems = append(problems, fmt.Sprintf("%s: its header has no %q line", file, "-- uses: "+want))
	case strings.Join(uses, ", ") != want:
		problems = append(problems, fmt.Sprintf("%s: its header says it uses %q, its table entry %q", file, strings.Join(uses, ", "), want))
	}
	return problems
}

// preludeHeader checks that a prelude file's header states its KEYS, ARGV
// (first: the first time it is met) and the preludes it reads, each of
// which s puts before it.
func preludeHeader(s *Script, p Prelude, before []string, first bool) []string {
	text, uses, ok := head(p.body)
	var problems []string
	for _, w := range []string{"KEYS", "ARGV"} {
		if first && !strings.Contains(text, w) {
			problems = append(problems, fmt.Sprintf("%s: its header does not state its %s", p.File, w))
		}
	}
	if !ok {
		if first {
			problems = append(problems, fmt.Sprintf("%s: its header has no \"-- uses: \" line", p.File))
		}
		return problems
	}
	for _, u := range uses {
		if u != "none" && !slices.Contains(before, u) {
			problems = append(problems, fmt.Sprintf("%s: prelude %s uses %s, which it does not follow", s.File, p.Name, u))
		}
	}
	return problems
}

// head is src's opening comment and the names on its "uses:" line.
func head(src string) (text string, uses []string, ok bool) {
	var lines []string
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(line, "--") {
			break
		}
		lines = append(lines, line)
		if u, found := strings.CutPrefix(line, "-- uses: "); found {
			uses, ok = strings.Split(strings.TrimSpace(u), ", "), true
		}
	}
	return strings.Join(lines, "\n"), uses, ok
}

// use is what one Lua source declares and reads.
type use struct {
	declared map[string]bool // anywhere: locals, parameters, loop variables
	top      map[string]bool // at its outermost block: what a prelude gives
	read     []string        // names read, called or assigned, in order
}

// free are the names u reads that are neither builtins, known nor
// declared by u, each once.
func (u use) free(known map[string]bool) []string {
	var out []string
	for _, n := range u.read {
		if !builtins[n] && !known[n] && !u.declared[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// scan reads src's names. Block depth tells the outermost block: function,
// do (for, while), if and repeat open one; end and until close it.
func scan(src string) use {
	u := use{declared: map[string]bool{}, top: map[string]bool{}}
	toks := tokens(src)
	depth, braces := 0, 0
	declare := func(n string) {
		u.declared[n] = true
		if depth == 0 {
			u.top[n] = true
		}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t {
		case "{":
			braces++
		case "}":
			braces--
		case "do", "if", "repeat":
			depth++
		case "end", "until":
			depth--
		case "local":
			if i+2 < len(toks) && toks[i+1] == "function" {
				declare(toks[i+2])
				continue // the function keyword is handled next
			}
			for i+1 < len(toks) && isName(toks[i+1]) {
				declare(toks[i+1])
				i++
				if i+1 >= len(toks) || toks[i+1] != "," {
					break
				}
				i++
			}
		case "function":
			j := i + 1
			if j < len(toks) && isName(toks[j]) {
				name := toks[j]
				j++
				if j < len(toks) && (toks[j] == "." || toks[j] == ":") {
					u.read = append(u.read, name) // a table's field: the table is read
					u.declared["self"] = true
					for j < len(toks) && (toks[j] == "." || toks[j] == ":") {
						j += 2
					}
				} else if i == 0 || toks[i-1] != "local" {
					declare(name) // a global function
				}
			}
			depth++ // the function's body, its parameters' scope
			for ; j < len(toks) && toks[j] != ")"; j++ {
				if isName(toks[j]) {
					u.declared[toks[j]] = true
				}
			}
			i = j
		case "for":
			for j := i + 1; j < len(toks) && toks[j] != "in" && toks[j] != "="; j++ {
				if isName(toks[j]) {
					u.declared[toks[j]] = true
				}
				i = j
			}
		default:
			if !isName(t) {
				continue
			}
			if i > 0 && (toks[i-1] == "." || toks[i-1] == ":" || toks[i-1] == "goto" || toks[i-1] == "::") {
				continue // a field, a method or a label
			}
			if braces > 0 && i+1 < len(toks) && toks[i+1] == "=" && i > 0 && (toks[i-1] == "{" || toks[i-1] == "," || toks[i-1] == ";") {
				continue // a table constructor's key
			}
			u.read = append(u.read, t)
		}
	}
	return u
}

func isName(t string) bool {
	if t == "" || keywords[t] {
		return false
	}
	c := t[0]
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// tokens splits src into Lua's tokens, leaving out comments, and each
// string as `""` (a string's text names nothing).
func tokens(src string) []string {
	var out []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.HasPrefix(src[i:], "--"):
			if n := longBracket(src[i+2:]); n > 0 {
				i += 2 + n
				continue
			}
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				return out
			}
			i += j
		case c == '[' && longBracket(src[i:]) > 0:
			i += longBracket(src[i:])
			out = append(out, `""`)
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
			out = append(out, `""`)
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			out = append(out, src[i:j])
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] == '.' || src[j] == 'x' || src[j] >= '0' && src[j] <= '9' || src[j] >= 'a' && src[j] <= 'f' || src[j] >= 'A' && src[j] <= 'F') {
				j++
			}
			out = append(out, "0")
			i = j
		default:
			n := 1
			for _, op := range []string{"...", "..", "==", "~=", "<=", ">=", "::"} {
				if strings.HasPrefix(src[i:], op) {
					n = len(op)
					break
				}
			}
			out = append(out, src[i:i+n])
			i += n
		}
	}
	return out
}

// longBracket is the length of the long string or comment body [=*[ ...
// ]=*] that s opens with, or 0 if it opens none.
func longBracket(s string) int {
	if !strings.HasPrefix(s, "[") {
		return 0
	}
	level := 1
	for level < len(s) && s[level] == '=' {
		level++
	}
	if level >= len(s) || s[level] != '[' {
		return 0
	}
	closing := "]" + strings.Repeat("=", level-1) + "]"
	j := strings.Index(s[level+1:], closing)
	if j < 0 {
		return len(s)
	}
	return level + 1 + j + len(closing)
}

// Consts are the constants src declares at its outermost block on lines
// `local A, B = 1, 'x'` whose names are all upper case, each as its Lua
// text ('x' unquoted).
func Consts(src string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(src, "\n") {
		decl, ok := strings.CutPrefix(line, "local ")
		if !ok {
			continue
		}
		lhs, rhs, ok := strings.Cut(decl, "=")
		if !ok {
			continue
		}
		names, values := strings.Split(lhs, ","), strings.Split(rhs, ",")
		if len(names) != len(values) {
			continue
		}
		for i, n := range names {
			n = strings.TrimSpace(n)
			if n == "" || strings.ToUpper(n) != n || !isName(n) {
				break
			}
			v := strings.TrimSpace(values[i])
			if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') {
				v = v[1 : len(v)-1]
			}
			out[n] = v
		}
	}
	return out
}

// Statuses reports where the statuses Lua and Go name disagree: goValues
// (by Lua name) against the constants (Consts) status declares, and
// others for names status leaves to them. It reports a name status
// declares that Go does not, one Go has that no prelude declares, a
// different value, and two names of one value.
func Statuses(goValues map[string]any, status Prelude, others ...Prelude) []string {
	var problems []string
	own := Consts(status.Src)
	lua := map[string]string{}
	for _, p := range others {
		maps.Copy(lua, Consts(p.Src))
	}
	maps.Copy(lua, own)
	byValue := map[string]string{}
	for _, n := range slices.Sorted(maps.Keys(goValues)) {
		want := fmt.Sprint(goValues[n])
		got, ok := lua[n]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("no prelude declares %s", n))
		case got != want:
			problems = append(problems, fmt.Sprintf("Lua declares %s = %s, Go %s", n, got, want))
		}
		if other, ok := byValue[want]; ok {
			problems = append(problems, fmt.Sprintf("%s and %s are both %s", other, n, want))
		}
		byValue[want] = n
	}
	for _, n := range slices.Sorted(maps.Keys(own)) {
		if _, ok := goValues[n]; !ok {
			problems = append(problems, fmt.Sprintf("prelude %s declares %s, which Go does not", status.Name, n))
		}
	}
	return problems
}
