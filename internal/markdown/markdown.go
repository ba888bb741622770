package markdown

import (
	"bufio"
	"strconv"
	"strings"
)

// Anchor is the fragment GitHub gives a heading's text: lower case, spaces
// to hyphens, and every other character but letters, digits, '-' and '_'
// dropped.
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Heading is one ATX heading ("## Text") of a document.
type Heading struct {
	Level  int
	Text   string
	Anchor string // unique in the document: a repeated one gets -1, -2, ...
	Body   string // the lines after it, up to the next heading of any level
}

// Headings lists a document's headings in order, skipping fenced code
// blocks, with the anchors GitHub gives them.
func Headings(doc string) []Heading {
	var out []Heading
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if fenced || level == 0 || level > 6 || len(line) == level || line[level] != ' ' {
			if len(out) > 0 {
				out[len(out)-1].Body += line + "\n"
			}
			continue
		}
		text := strings.TrimSpace(line[level:])
		anchor := Anchor(text)
		if n := seen[anchor]; n > 0 {
			seen[anchor] = n + 1
			anchor += "-" + strconv.Itoa(n)
		} else {
			seen[anchor] = 1
		}
		out = append(out, Heading{Level: level, Text: text, Anchor: anchor})
	}
	return out
}
