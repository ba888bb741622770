package markdown

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"HeadcountCountDrift":               "headcountcountdrift",
		"Reading the dashboard":             "reading-the-dashboard",
		"Rotate a secret (without a gap)":   "rotate-a-secret-without-a-gap",
		"`cleaner audit` and --repair":      "cleaner-audit-and---repair",
		"headcount vs soketi, side by side": "headcount-vs-soketi-side-by-side",
	} {
		require.Equal(t, want, Anchor(heading), heading)
	}
}

func TestHeadingsSkipCodeAndNumberRepeats(t *testing.T) {
	doc := "# Title\n\n```sh\n# not a heading\n```\n\n## Run\n\n### Run\n\n#nospace\n"
	var got []string
	for _, h := range Headings(doc) {
		got = append(got, h.Anchor)
	}
	require.Equal(t, []string{"title", "run", "run-1"}, got)
	require.Equal(t, "\n```sh\n# not a heading\n```\n\n", Headings(doc)[0].Body)
	require.Equal(t, "\n#nospace\n", Headings(doc)[2].Body)
}

// repoURL is how documents and alert annotations link to this repository's
// files on GitHub; such links are checked against the working tree.
const repoURL = "https://github.com/headcount/headcount/blob/main/"

var (
	link       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	skipPrefix = []string{"http://", "https://", "mailto:", "<"}
	skipDirs   = map[string]bool{"node_modules": true, ".tools": true, ".cache": true, ".run": true, "bin": true, ".git": true}
)

// TestRepositoryLinks: every relative link in the repository's Markdown
// (and every link to this repository on GitHub) names a file that exists,
// and its #fragment a heading of that file. Documents move text between
// them; a link left behind fails here instead of on a reader.
func TestRepositoryLinks(t *testing.T) {
	root := repoRoot(t)
	anchors := map[string]map[string]bool{} // file -> anchors
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		a := map[string]bool{}
		for _, h := range Headings(string(b)) {
			a[h.Anchor] = true
		}
		anchors[file] = a
		return a
	}
	var broken []string
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fenced := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				base := filepath.Dir(path)
				if strings.HasPrefix(target, repoURL) {
					target, base = strings.TrimPrefix(target, repoURL), root
				} else if hasAnyPrefix(target, skipPrefix) {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(base, file)
				}
				where := rel + ":" + strconv.Itoa(i+1) + ": " + m[1]
				if _, err := os.Stat(dest); err != nil {
					broken = append(broken, where+" (no such file)")
					continue
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
					broken = append(broken, where+" (no such heading)")
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, checked, 100, "the walk found too few links: is the root right?")
	require.Empty(t, broken, "broken links:\n%s", strings.Join(broken, "\n"))
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no repository root above the test")
		dir = parent
	}
}
