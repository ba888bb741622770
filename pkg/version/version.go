package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the build with -ldflags -X when Go could not stamp VCS
// information itself; Go's own stamp wins when both are present.
var (
	revision string // full commit hash
	time     string // commit time, RFC 3339
	modified string // "true" when the tree had uncommitted changes
)

// Info is what --version prints.
type Info struct {
	// Version is the main module's version: a tag, a pseudo-version
	// (v0.0.0-<time>-<revision>[+dirty]) or "(devel)" when unknown.
	Version string
	// Revision is the commit hash, or "" when unknown.
	Revision string
	// Time is the commit time, or "" when unknown.
	Time string
	// Modified reports uncommitted changes in the tree the binary was
	// built from.
	Modified bool
	// Go is the toolchain that built the binary.
	Go string
}

// Get returns this binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuild(bi, revision, time, modified)
}

// fromBuild merges Go's build information (nil when absent) with the
// values given at link time.
func fromBuild(bi *debug.BuildInfo, rev, at, mod string) Info {
	i := Info{Version: "(devel)", Revision: rev, Time: at, Modified: mod == "true", Go: runtime.Version()}
	if bi == nil {
		return i
	}
	if v := bi.Main.Version; v != "" {
		i.Version = v
	}
	if bi.GoVersion != "" {
		i.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String is the one line --version prints, after the binary's name:
//
//	v0.0.0-20261125113724-5092c9a6ac00+dirty (revision 5092c9a6ac0005a1e7aebaa3ce278f439806c279, 2026-11-25T11:37:24Z, modified; go1.26.8)
//	(devel) (revision unknown; go1.26.8)
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (revision ")
	if i.Revision == "" {
		b.WriteString("unknown")
	} else {
		b.WriteString(i.Revision)
		if i.Time != "" {
			b.WriteString(", " + i.Time)
		}
		if i.Modified {
			b.WriteString(", modified")
		}
	}
	fmt.Fprintf(&b, "; %s)", i.Go)
	return b.String()
}

// Line is what `<binary> --version` prints: the binary's name and String.
func Line(binary string) string { return binary + " " + Get().String() }
