package console

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// chartData is an SVG line chart of the samples, drawn on the server so the
// page needs no script to show it. It has two panels, each with its own
// scale: the unresolved operations, a level that goes up and down, and
// the attempts and confirmed effects, running totals that only grow, and
// would flatten the first on a shared scale. Each panel's axis is labelled
// with 0 and its highest value; points are placed by the time they were
// sampled, and no line is drawn across a gap in the sampling.
type chartData struct {
	Width, Height int
	// Left and Right bound the plots; the axis labels are left of Left.
	Left, Right int
	Panels      []chartPanel
	// From and To label the time axis; Range is the whole span, dated.
	From, To, Range string
	// AxisY is the baseline of the time axis labels.
	AxisY int
	Empty bool
}

// chartPanel is one plot of the chart, with its own scale.
type chartPanel struct {
	Title string
	// TitleY is the title's baseline; Top and Bottom bound the plot.
	TitleY, Top, Bottom int
	// Max is the value at Top: the highest the panel's series reach (at
	// least 1).
	Max    int
	Series []chartSeries
}

type chartSeries struct {
	Name  string
	Class string
	// Lines are SVG polyline points, one polyline for each run of samples
	// without a gap (gaps).
	Lines []string
	Last  int
	// Highest is the series' highest value in the samples.
	Highest int
}

// The chart's layout, in SVG units.
const (
	chartWidth  = 600
	chartLeft   = 64 // room for the axis labels
	chartRight  = chartWidth - 8
	chartPlotH  = 80
	chartTitleH = 22 // from a panel's title baseline to its plot
	chartGap    = 26 // from a plot's bottom to the next title's baseline
)

func chart(samples []Sample) chartData {
	c := chartData{Width: chartWidth, Left: chartLeft, Right: chartRight, Empty: len(samples) < 2}
	if c.Empty {
		return c
	}
	first, last := samples[0].At, samples[len(samples)-1].At
	c.From, c.To, c.Range = timeLabels(first, last)
	span := last.Sub(first)
	// x places a sample by its time. Samples are recorded in order; a
	// span of zero (or less, which a clock stepping back could give)
	// puts every point at the right edge rather than divide by it.
	x := func(at time.Time) float64 {
		if span <= 0 {
			return chartRight
		}
		f := float64(at.Sub(first)) / float64(span)
		f = min(max(f, 0), 1)
		return chartLeft + f*float64(chartRight-chartLeft)
	}
	breaks := gaps(samples)
	type series struct {
		name, class string
		get         func(Sample) int
	}
	panels := []struct {
		title  string
		series []series
	}{
		{"unresolved operations (uncertain and held)", []series{
			{"unresolved", "s-unresolved", func(s Sample) int { return s.Unresolved }},
		}},
		{"attempts and confirmed effects (running totals)", []series{
			{"attempts", "s-attempts", func(s Sample) int { return s.Attempts }},
			{"confirmed effects", "s-effects", func(s Sample) int { return s.ConfirmedEffects }},
		}},
	}
	y := 0
	for _, p := range panels {
		panel := chartPanel{Title: p.title, TitleY: y + 14, Top: y + chartTitleH, Max: 1}
		panel.Bottom = panel.Top + chartPlotH
		for _, s := range samples {
			for _, se := range p.series {
				panel.Max = max(panel.Max, se.get(s))
			}
		}
		for _, se := range p.series {
			out := chartSeries{Name: se.name, Class: se.class, Last: se.get(samples[len(samples)-1])}
			var b strings.Builder
			for i, s := range samples {
				if breaks[i] {
					out.Lines = append(out.Lines, strings.TrimSpace(b.String()))
					b.Reset()
				}
				v := max(se.get(s), 0)
				out.Highest = max(out.Highest, v)
				py := float64(panel.Bottom) - float64(v)*float64(chartPlotH)/float64(panel.Max)
				fmt.Fprintf(&b, "%.1f,%.1f ", x(s.At), py)
			}
			out.Lines = append(out.Lines, strings.TrimSpace(b.String()))
			panel.Series = append(panel.Series, out)
		}
		c.Panels = append(c.Panels, panel)
		y = panel.Bottom + chartGap - 14
	}
	c.AxisY = y + 14
	c.Height = c.AxisY + 6
	return c
}

// timeLabels labels the time axis from first to last, in UTC: each end
// dated when the span crosses midnight (or is more than a day), only the
// start otherwise; and the whole span for the caption, dated.
func timeLabels(first, last time.Time) (from, to, span string) {
	f, l := first.UTC(), last.UTC()
	from = f.Format("2006-01-02 15:04")
	to = l.Format("15:04") + " UTC"
	if f.Format(time.DateOnly) != l.Format(time.DateOnly) {
		to = l.Format("2006-01-02 15:04") + " UTC"
	}
	return from, to, from + " – " + to
}

// gaps marks the samples that follow a gap in the sampling (the server
// stopped, or could not read the counters): more than three times the
// usual (median) interval after the one before. The chart does not draw a
// line across a gap, which would show values nobody read.
func gaps(samples []Sample) []bool {
	out := make([]bool, len(samples))
	var steps []time.Duration
	for i := 1; i < len(samples); i++ {
		steps = append(steps, samples[i].At.Sub(samples[i-1].At))
	}
	if len(steps) < 2 {
		return out
	}
	sorted := slices.Clone(steps)
	slices.Sort(sorted)
	usual := sorted[len(sorted)/2]
	if usual <= 0 {
		return out
	}
	for i, d := range steps {
		out[i+1] = d > 3*usual
	}
	return out
}
