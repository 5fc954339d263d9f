package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart's geometry. 7 inches is the width of a page or a README
// column; 3 inches a panel (plus its legend) leave, after the title and
// the x axis, a data area of about 150 pt: tall enough to tell 0.9 from 1
// on the y axis, short enough to see several scenarios at once.
const (
	chartWidth  = 7 * vg.Inch
	panelHeight = 3 * vg.Inch
)

// maxPointsPerLine bounds each curve. A scenario can time millions of
// samples, and an SVG path of millions of points is megabytes that a
// browser chokes on; 500 points put consecutive points at most 1/500 of
// the y range apart, a third of a point on a panel's data area of about
// 150 pt, which the eye cannot tell from the full curve.
const maxPointsPerLine = 500

// minMicros is where a latency is clamped on the log axis: a zero (or,
// from a clock step, negative) duration has no logarithm and would make
// gonum's log scale panic. 10 ns is less than two calls of time.Now
// take, so no real measurement is drawn there.
const minMicros = 0.01

// lineColors are dark enough to read on white and far apart in hue; each
// line also gets its own dash pattern (lineDashes), so curves stay apart
// in grey print and for readers who do not tell red from green.
var lineColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x4e, B: 0xa0, A: 0xff}, // blue
	color.RGBA{R: 0xd0, G: 0x5a, B: 0x00, A: 0xff}, // orange
	color.RGBA{R: 0x1b, G: 0x8a, B: 0x3c, A: 0xff}, // green
	color.RGBA{R: 0xa0, G: 0x1f, B: 0x6e, A: 0xff}, // purple
	color.RGBA{R: 0x40, G: 0x40, B: 0x40, A: 0xff}, // grey
}

var lineDashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(2), vg.Points(2)},
	{vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)},
	{vg.Points(1), vg.Points(3)},
}

// errNoSamples is WriteChart's answer when there is nothing to draw: an
// SVG with no panel would look like a rendering bug.
var errNoSamples = errors.New("no latency samples to chart")

// WriteChart draws the latency distributions of results as an SVG: one
// panel per result that has samples, stacked top to bottom in the order
// given, each with one cumulative distribution per Latency. A CDF rather
// than a histogram because it needs no bin width, shows every percentile
// at once (read p50 at 0.5, p99 near the top), and keeps curves of very
// different counts comparable; the x axis is logarithmic because one
// panel can hold sub-microsecond decisions and millisecond round trips.
// Latencies without samples are left out, and a result with none at all
// gets no panel; when no result has any, WriteChart writes nothing and
// returns an error.
func WriteChart(w io.Writer, results []*Result) error {
	var panels []panel
	for _, r := range results {
		if r == nil {
			continue
		}
		p, ok, err := latencyPanel(r)
		if err != nil {
			return fmt.Errorf("chart %s: %w", r.Scenario, err)
		}
		if ok {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return errNoSamples
	}

	// Each legend goes in a strip under its panel's axis label rather than
	// over the data: CDFs of latencies that differ by decades leave no
	// corner of the data area reliably empty. Every panel gets the strip
	// of the longest legend, so the panels stay the same size.
	var strip vg.Length
	for _, p := range panels {
		strip = max(strip, p.legend.Rectangle(draw.Canvas{}).Size().Y+legendGap)
	}
	c := vgsvg.New(chartWidth, (panelHeight+strip)*vg.Length(len(panels)))
	column := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		column[i] = []*plot.Plot{p.plot}
	}
	// Align gives every panel the same data area, so the y axes line up
	// and the eye can compare curves across panels; cropping the same
	// strip off each keeps them so.
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(18)}
	for i, row := range plot.Align(column, tiles, draw.New(c)) {
		p, tile := panels[i], row[0]
		area := draw.Crop(tile, 0, 0, strip, 0)
		p.plot.Draw(area)
		under := tile
		under.Min.X = p.plot.DataCanvas(area).Min.X
		under.Max.Y = tile.Min.Y + strip - legendGap
		p.legend.Draw(under)
	}
	_, err := c.WriteTo(w)
	return err
}

// legendGap separates a panel's axis label from its legend.
const legendGap vg.Length = 8 // points

// panel is one scenario's plot and its legend, drawn apart.
type panel struct {
	plot   *plot.Plot
	legend plot.Legend
}

// latencyPanel is r's panel; ok is false when r has no samples.
func latencyPanel(r *Result) (_ panel, ok bool, _ error) {
	p := plot.New()
	p.Title.Text = r.Scenario
	if r.Partial {
		p.Title.Text += " (partial)"
	}
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "fraction at or below"
	p.X.Scale = plot.LogScale{}
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"},
		{Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 0.9, Label: "0.9"}, {Value: 1, Label: "1"}}
	p.Add(plotter.NewGrid())
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.ThumbnailWidth = vg.Points(30)
	legend.Padding = vg.Points(2)

	lo, hi := math.Inf(1), math.Inf(-1)
	drawn := 0
	for _, l := range r.Latencies {
		if len(l.Samples) == 0 {
			continue
		}
		pts := cdfPoints(l.Samples, maxPointsPerLine)
		line, err := plotter.NewLine(pts)
		if err != nil {
			return panel{}, false, fmt.Errorf("latency %s: %w", l.Name, err)
		}
		// The empirical CDF is a staircase: it holds its value until the
		// next sample. PostStep draws it so for few samples; with many
		// the steps are too small to see.
		line.StepStyle = plotter.PostStep
		line.Color = lineColors[drawn%len(lineColors)]
		line.Dashes = lineDashes[drawn%len(lineDashes)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		legend.Add(l.Name, line)
		lo, hi = math.Min(lo, pts[0].X), math.Max(hi, pts[len(pts)-1].X)
		drawn++
	}
	if drawn == 0 {
		return panel{}, false, nil
	}
	// Whole decades at both ends, so the axis starts and ends on a
	// labelled tick; at least one decade, so a constant latency is a
	// vertical line inside the panel, not a range of zero width.
	minExp, maxExp := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	if maxExp == minExp {
		maxExp++
	}
	p.X.Min, p.X.Max = math.Pow10(minExp), math.Pow10(maxExp)
	p.X.Tick.Marker = plot.TickerFunc(decadeTicks)
	return panel{plot: p, legend: legend}, true, nil
}

// cdfPoints is the empirical CDF of sorted (as latencyOf leaves them)
// samples in microseconds, at most limit+1 points: the curve starts at 0
// at the fastest sample, then every point (x, y) says that a fraction y
// of the samples took x or less. Above limit samples, points are taken
// at evenly spaced ranks, always including the fastest and the slowest,
// so the curve spans the full range and the tail keeps its end.
func cdfPoints(sorted []time.Duration, limit int) plotter.XYs {
	n := len(sorted)
	us := func(d time.Duration) float64 {
		return math.Max(float64(d.Nanoseconds())/1000, minMicros)
	}
	m := min(n, max(limit, 2)) // two points at least: the fastest and the slowest
	pts := make(plotter.XYs, 0, m+1)
	pts = append(pts, plotter.XY{X: us(sorted[0]), Y: 0})
	for k := range m {
		i := k
		if m < n {
			i = k * (n - 1) / (m - 1)
		}
		pts = append(pts, plotter.XY{X: us(sorted[i]), Y: float64(i+1) / float64(n)})
	}
	return pts
}

// decadeTicks labels every power of ten between min and max (the axis
// ends on decades, see latencyPanel) with smaller ticks at 2..9 times
// each; on an axis of one or two decades, where decade labels alone
// would leave the reader two or three numbers, 2x and 5x are labelled
// too. plot.LogTicks would do nearly this, but it finds the first decade
// by truncating log10(min) toward zero, and math.Log10(0.1) is -0.999…,
// so an axis from 0.1 µs would lose its first label.
func decadeTicks(min, max float64) []plot.Tick {
	first, last := int(math.Round(math.Log10(min))), int(math.Round(math.Log10(max)))
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		v := math.Pow10(e)
		ticks = append(ticks, plot.Tick{Value: v, Label: microsLabel(v)})
		for i := 2; i < 10 && e < last; i++ {
			t := plot.Tick{Value: v * float64(i)}
			if last-first <= 2 && (i == 2 || i == 5) {
				t.Label = microsLabel(t.Value)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// microsLabel writes a tick's microseconds as the table does, with
// thousands separators ("10,000") rather than plot's default "1e+04".
// Labelled ticks are 1, 2 or 5 times a power of ten, which six
// significant digits print exactly ("0.02" where the product is
// 0.020000000000000004).
func microsLabel(v float64) string {
	if v < 1000 {
		return strconv.FormatFloat(v, 'g', 6, 64)
	}
	return Thousands(v)
}

// Thousands prints v rounded to a whole number with thousands
// separators: 15,050.
func Thousands(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	digits := strings.TrimPrefix(s, "-")
	out := make([]byte, 0, len(s)+len(s)/3)
	out = append(out, s[:len(s)-len(digits)]...)
	for i := range len(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, digits[i])
	}
	return string(out)
}
