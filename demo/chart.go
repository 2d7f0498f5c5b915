package demo

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"sort"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// The chart is drawn with the standard library's image packages and the
// fixed 7x13 font of golang.org/x/image: no plotting dependency for one
// picture.

var (
	white       = color.RGBA{255, 255, 255, 255}
	ink         = color.RGBA{40, 40, 40, 255}
	grid        = color.RGBA{228, 228, 228, 255}
	seriesColor = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {140, 86, 75, 255}}
	spikeColor  = color.RGBA{120, 120, 120, 255}
	detectColor = color.RGBA{255, 127, 14, 255}
	routeColor  = color.RGBA{0, 140, 70, 255}
	eventColor  = color.RGBA{148, 103, 189, 255}
)

// marker is a moment drawn as a vertical line with a label.
type marker struct {
	at     time.Duration
	label  string
	color  color.RGBA
	dashed bool
}

type canvas struct {
	img                      *image.RGBA
	left, top, right, bottom int // plot area
	xMax                     float64
	yMax                     float64
}

func (c *canvas) x(sec float64) int {
	return c.left + int(math.Round(sec/c.xMax*float64(c.right-c.left)))
}

func (c *canvas) y(v float64) int {
	return c.bottom - int(math.Round(v/c.yMax*float64(c.bottom-c.top)))
}

func (c *canvas) dot(x, y, r int, col color.Color) {
	for dx := -r; dx <= r; dx++ {
		for dy := -r; dy <= r; dy++ {
			c.img.Set(x+dx, y+dy, col)
		}
	}
}

// line draws a segment (Bresenham) with half-width r.
func (c *canvas) line(x0, y0, x1, y1, r int, col color.Color) {
	dx, dy := iabs(x1-x0), -iabs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.dot(x0, y0, r, col)
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

func (c *canvas) vline(x, y0, y1 int, col color.Color, dashed bool) {
	for y := y0; y <= y1; y++ {
		if dashed && (y/5)%2 == 1 {
			continue
		}
		c.img.Set(x, y, col)
		c.img.Set(x+1, y, col)
	}
}

func (c *canvas) text(x, y int, s string, col color.Color) {
	d := font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(s string) int {
	return font.MeasureString(basicfont.Face7x13, s).Round()
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

// niceMax rounds v up to 1, 2 or 5 times a power of ten.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// writeChart draws ops/s per master over time with the spikes, detections,
// routings and the scheduled event marked, and writes it as PNG to path.
func writeChart(path string, r *Result) error {
	const w, h = 1100, 560
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	c := &canvas{img: img, left: 70, top: 110, right: w - 30, bottom: h - 60}

	var top, last float64
	for _, s := range r.Samples {
		last = max(last, s.T.Seconds())
		for _, v := range s.OpsPerSec {
			top = max(top, v)
		}
	}
	c.xMax = max(math.Ceil(last), 1)
	c.yMax = niceMax(top * 1.05)

	c.text(c.left, 24, "heatsink demo: Redis ops/s per master (measured by Redis INFO), 1 s samples", ink)
	c.text(c.left, 42, fmt.Sprintf("viral read %s and viral counter %s live on master %d", r.Keys.ViralRead, r.Keys.Counter, r.Keys.HotMaster+1), ink)
	ratios := fmt.Sprintf("busiest / mean: before relief %s (peak %s), after relief %s", ratioText(r.RatioBefore), ratioText(r.RatioPeak), ratioText(r.RatioAfter))
	c.text(c.left, 60, ratios, ink)

	// Markers: vertical lines, labelled in rows above the plot; each label
	// takes the first row where it does not overlap the one before it.
	var ms []marker
	add := func(t time.Time, label string, col color.RGBA, dashed bool) {
		if !t.IsZero() {
			ms = append(ms, marker{at: t.Sub(r.Start), label: label, color: col, dashed: dashed})
		}
	}
	add(r.ViralRead.Spike, "read spike", spikeColor, true)
	add(r.ViralRead.Detected, "read key detected", detectColor, true)
	add(r.ViralRead.Routed, "read key cached", routeColor, false)
	add(r.Counter.Spike, "write spike", spikeColor, true)
	add(r.Counter.Detected, "counter detected", detectColor, true)
	add(r.Counter.Routed, "split announced", routeColor, true)
	if r.Counter.Relief.After(r.Counter.Routed) {
		add(r.Counter.Relief, "split in effect", routeColor, false)
	}
	add(r.EventRouted, "sale keys pre-warmed", eventColor, true)
	add(r.EventStart, "flash sale starts", eventColor, false)
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].at < ms[j].at })
	type placed struct {
		m     marker
		x, tx int
		row   int
	}
	var rowEnd []int
	var labels []placed
	for _, m := range ms {
		sec := m.at.Seconds()
		if sec < 0 || sec > c.xMax {
			continue
		}
		x := c.x(sec)
		tx := x - textWidth(m.label)/2
		tx = min(max(tx, 4), w-4-textWidth(m.label))
		row := 0
		for row < len(rowEnd) && rowEnd[row]+8 > tx {
			row++
		}
		if row == len(rowEnd) {
			rowEnd = append(rowEnd, 0)
		}
		rowEnd[row] = tx + textWidth(m.label)
		labels = append(labels, placed{m: m, x: x, tx: tx, row: row})
	}
	const labelTop, rowH = 84, 14
	c.top = labelTop + len(rowEnd)*rowH + 10
	drawMarkers := func() {
		for _, l := range labels {
			ly := labelTop + l.row*rowH
			c.vline(l.x, ly+3, c.bottom, l.m.color, l.m.dashed)
			c.text(l.tx, ly, l.m.label, l.m.color)
		}
	}

	// Grid and axes.
	for i := 0; i <= 5; i++ {
		v := c.yMax * float64(i) / 5
		y := c.y(v)
		for x := c.left; x <= c.right; x++ {
			img.Set(x, y, grid)
		}
		lbl := fmt.Sprintf("%.0f", v)
		c.text(c.left-8-textWidth(lbl), y+4, lbl, ink)
	}
	step := 10.0
	if c.xMax <= 40 {
		step = 5
	}
	for s := 0.0; s <= c.xMax; s += step {
		x := c.x(s)
		c.vline(x, c.bottom, c.bottom+4, ink, false)
		lbl := fmt.Sprintf("%.0fs", s)
		c.text(x-textWidth(lbl)/2, c.bottom+18, lbl, ink)
	}
	c.line(c.left, c.bottom, c.right, c.bottom, 0, ink)
	c.line(c.left, c.top, c.left, c.bottom, 0, ink)
	c.text((c.left+c.right)/2-60, h-20, "time since traffic started", ink)
	c.text(8, c.top-12, "ops/s", ink)

	drawMarkers()

	// Series.
	for mi := range r.Masters {
		col := seriesColor[mi%len(seriesColor)]
		px, py := -1, -1
		for _, s := range r.Samples {
			if mi >= len(s.OpsPerSec) {
				continue
			}
			x, y := c.x(s.T.Seconds()), c.y(s.OpsPerSec[mi])
			if px >= 0 {
				c.line(px, py, x, y, 1, col)
			}
			c.dot(x, y, 2, col)
			px, py = x, y
		}
	}

	// Legend.
	lx := c.right - 230
	for mi, addr := range r.Masters {
		col := seriesColor[mi%len(seriesColor)]
		y := c.top + 16 + mi*16
		c.line(lx, y-4, lx+20, y-4, 1, col)
		c.text(lx+26, y, fmt.Sprintf("master %d %s", mi+1, addr), ink)
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

func iabs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
