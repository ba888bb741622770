package version

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFromBuild(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261125113724-5092c9a6ac00+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "5092c9a6ac0005a1e7aebaa3ce278f439806c279"},
			{Key: "vcs.time", Value: "2026-11-25T11:37:24Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name         string
		bi           *debug.BuildInfo
		rev, at, mod string
		want         string
	}{
		{"stamped by go", stamped, "", "", "",
			"v0.0.0-20261125113724-5092c9a6ac00+dirty (revision 5092c9a6ac0005a1e7aebaa3ce278f439806c279, 2026-11-25T11:37:24Z, modified; go1.26.8)"},
		{"go's stamp wins over the linker's", stamped, "aaaa", "2000-01-01T00:00:00Z", "false",
			"v0.0.0-20261125113724-5092c9a6ac00+dirty (revision 5092c9a6ac0005a1e7aebaa3ce278f439806c279, 2026-11-25T11:37:24Z, modified; go1.26.8)"},
		{"given at link time", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, "abcdef", "2026-11-25T11:37:24Z", "false",
			"(devel) (revision abcdef, 2026-11-25T11:37:24Z; go1.26.8)"},
		{"unknown", &debug.BuildInfo{GoVersion: "go1.26.8"}, "", "", "",
			"(devel) (revision unknown; go1.26.8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, fromBuild(tc.bi, tc.rev, tc.at, tc.mod).String())
		})
	}
	require.Contains(t, Line("wsnode"), "wsnode ")
	require.Contains(t, Line("wsnode"), "(revision ")
}
