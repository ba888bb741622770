package e2e

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// series is one line of a plot.
type series struct {
	name   string
	xs, ys []float64
}

var palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255}}

// linePlot writes a PNG line chart of ss (x on a log10 scale if logX) to
// path: axes with five labelled ticks each, a marker at every point and a
// legend. Benchmarks use it for BENCHMARKS.md; no plotting library needed.
func linePlot(path, title, xLabel, yLabel string, logX bool, ss ...series) error {
	const w, h, left, right, top, bottom = 800, 480, 80, 30, 50, 60
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	tx := func(x float64) float64 {
		if logX {
			return math.Log10(math.Max(x, 1e-9))
		}
		return x
	}
	minX, maxX, maxY := math.Inf(1), math.Inf(-1), 0.0
	for _, s := range ss {
		for i := range s.xs {
			minX, maxX, maxY = math.Min(minX, tx(s.xs[i])), math.Max(maxX, tx(s.xs[i])), math.Max(maxY, s.ys[i])
		}
	}
	if !logX {
		minX = 0
	}
	if maxX == minX {
		maxX = minX + 1
	}
	maxY = niceCeil(maxY * 1.05)
	px := func(x float64) int { return left + int((tx(x)-minX)/(maxX-minX)*float64(w-left-right)) }
	py := func(y float64) int { return h - bottom - int(y/maxY*float64(h-top-bottom)) }
	grey, black := color.RGBA{220, 220, 220, 255}, color.RGBA{0, 0, 0, 255}
	for i := 0; i <= 5; i++ { // y grid and labels
		y := maxY * float64(i) / 5
		line(img, left, py(y), w-right, py(y), grey)
		label(img, left-8-7*len(fmtNum(y)), py(y)+4, fmtNum(y), black)
	}
	var ticks []float64 // decades on a log scale, else five steps
	if logX {
		for d := math.Ceil(minX); d <= maxX; d++ {
			ticks = append(ticks, math.Pow(10, d))
		}
	} else {
		for i := 0; i <= 5; i++ {
			ticks = append(ticks, minX+(maxX-minX)*float64(i)/5)
		}
	}
	for _, v := range ticks {
		x := px(v)
		line(img, x, h-bottom, x, h-bottom+5, black)
		label(img, x-7*len(fmtNum(v))/2, h-bottom+18, fmtNum(v), black)
	}
	line(img, left, top, left, h-bottom, black)
	line(img, left, h-bottom, w-right, h-bottom, black)
	label(img, left, 25, title, black)
	label(img, (w-7*len(xLabel))/2, h-15, xLabel, black)
	label(img, 5, top-10, yLabel, black)
	for k, s := range ss {
		c := palette[k%len(palette)]
		for i := range s.xs {
			x, y := px(s.xs[i]), py(s.ys[i])
			draw.Draw(img, image.Rect(x-3, y-3, x+4, y+4), &image.Uniform{c}, image.Point{}, draw.Src)
			if i > 0 {
				line(img, px(s.xs[i-1]), py(s.ys[i-1]), x, y, c)
			}
		}
		draw.Draw(img, image.Rect(w-right-150, top+10+18*k, w-right-140, top+20+18*k), &image.Uniform{c}, image.Point{}, draw.Src)
		label(img, w-right-134, top+20+18*k, s.name, black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func label(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// niceCeil rounds v up to a round multiple of a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e7 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return fmt.Sprintf("%.3g", v)
}
