package e2e

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLinePlot: a plot is a PNG of the asked size, the same figures draw
// the same bytes (so committed plots change only when their numbers do),
// and a value a log scale cannot show is an error, not a panic.
func TestLinePlot(t *testing.T) {
	dir := t.TempDir()
	p50 := series{name: "p50", xs: []float64{1, 10, 100, 1000, 10000}, ys: []float64{1.0, 1.2, 1.8, 6.5, 56.9}}
	p99 := series{name: "p99", xs: p50.xs, ys: []float64{1.2, 1.6, 2.6, 12.1, 117.6}}
	draw := func(name string) []byte {
		t.Helper()
		path := filepath.Join(dir, name)
		require.NoError(t, linePlot(path, "latency", "subscribers", "ms", plotScale{logX: true, logY: true}, p50, p99))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return b
	}
	first := draw("a.png")
	require.Equal(t, first, draw("b.png"), "the same figures draw the same bytes")
	img, err := png.Decode(bytes.NewReader(first))
	require.NoError(t, err)
	require.Equal(t, 768, img.Bounds().Dx(), "8 inches at 96 dpi")
	require.InDelta(t, 461, img.Bounds().Dy(), 1, "4.8 inches at 96 dpi")

	table, err := os.ReadFile(filepath.Join(dir, "a.md"))
	require.NoError(t, err)
	require.Regexp(t, `^latency, drawn \d{4}-\d\d-\d\d \d\d:\d\d UTC:\n\n`+
		`\| subscribers \| p50 \| p99 \|\n\|---:\|---:\|---:\|\n\| 1 \| 1 \| 1\.2 \|\n`, string(table))
	require.Contains(t, string(table), "| 10000 | 56.9 | 117.6 |\n")

	zero := series{name: "p50", xs: []float64{0, 10}, ys: []float64{1, 2}}
	require.ErrorContains(t, linePlot(filepath.Join(dir, "c.png"), "t", "x", "y", plotScale{logX: true}, zero), "log scale")
	require.NoError(t, linePlot(filepath.Join(dir, "d.png"), "t", "x", "y", plotScale{}, zero), "a linear axis takes 0")
}
