package e2e

// plot_test.go: the PNG plots benchmarks draw for BENCHMARKS.md
// (docs/bench), with gonum.org/v1/plot. Its fonts are embedded and its
// rasterizer has no randomness: the same figures draw the same bytes, so
// the plots can be committed.

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one line of a plot.
type series struct {
	name   string
	xs, ys []float64
}

var palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255}}

// plotScale says which axes of a linePlot are on a log10 scale.
type plotScale struct{ logX, logY bool }

// linePlot writes a PNG line chart of ss to path: a marker and its value at
// every point, a grid and a legend. A log axis (the values must then be
// positive) has a tick at every decade, so a curve over 1 to 10,000 shows
// each decade's share, and two series an order of magnitude apart both
// stay readable. Beside it, path with .md for .png gets the figures as a
// table, which bench.sh puts under the plot in BENCHMARKS.md.
func linePlot(path, title, xLabel, yLabel string, sc plotScale, ss ...series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	for _, a := range []struct {
		axis *plot.Axis
		log  bool
	}{{&p.X, sc.logX}, {&p.Y, sc.logY}} {
		if a.log {
			a.axis.Scale = plot.LogScale{}
			a.axis.Tick.Marker = plot.LogTicks{Prec: -1}
		} else {
			// From 0, labelled as plain numbers (not 2500.00).
			a.axis.Min = 0
			a.axis.Tick.Marker = plainTicks{}
		}
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(-4)
	for i, s := range ss {
		if len(s.xs) != len(s.ys) || len(s.xs) == 0 {
			return fmt.Errorf("plot %s: series %q has %d x and %d y values", path, s.name, len(s.xs), len(s.ys))
		}
		xys := make(plotter.XYs, len(s.xs))
		labels := make([]string, len(s.xs))
		for j := range s.xs {
			if (sc.logX && s.xs[j] <= 0) || (sc.logY && s.ys[j] <= 0) {
				return fmt.Errorf("plot %s: series %q has %v, %v on a log scale", path, s.name, s.xs[j], s.ys[j])
			}
			xys[j] = plotter.XY{X: s.xs[j], Y: s.ys[j]}
			labels[j] = fmtNum(s.ys[j])
		}
		c := palette[i%len(palette)]
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		pts.Color = c
		pts.Shape = draw.CircleGlyph{}
		pts.Radius = vg.Points(3)
		vals, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		for j := range vals.TextStyle {
			vals.TextStyle[j].Color = c
		}
		vals.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(3)}
		p.Add(l, pts, vals)
		p.Legend.Add(s.name, l, pts)
	}
	if err := p.Save(8*vg.Inch, 4.8*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return writePlotTable(strings.TrimSuffix(path, ".png")+".md", title, xLabel, ss)
}

// writePlotTable writes the figures of ss as a markdown table, a row per x
// value (the series' x values in order of first appearance).
func writePlotTable(path, title, xLabel string, ss []series) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, drawn %s:\n\n| %s |", title, time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		strings.TrimSuffix(xLabel, " (log scale)"))
	for _, s := range ss {
		fmt.Fprintf(&b, " %s |", s.name)
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|", len(ss)) + "\n")
	var xs []float64
	for _, s := range ss {
		for _, x := range s.xs {
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
		}
	}
	for _, x := range xs {
		fmt.Fprintf(&b, "| %s |", fmtNum(x))
		for _, s := range ss {
			v := ""
			if i := slices.Index(s.xs, x); i >= 0 {
				v = fmtNum4(s.ys[i])
			}
			fmt.Fprintf(&b, " %s |", v)
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("plot table %s: %w", path, err)
	}
	return nil
}

// plainTicks are gonum's default ticks labelled by fmtNum.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = fmtNum(ticks[i].Value)
		}
	}
	return ticks
}

// fmtNum4 writes a value of a plot's table with four significant digits at
// most: the precision go test prints custom metrics with.
func fmtNum4(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e7 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

// fmtNum writes a plotted value with three significant digits at most.
func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e7 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
