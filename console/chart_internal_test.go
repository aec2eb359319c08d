package console

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// points parses an SVG polyline's points, failing on anything but finite
// numbers.
func points(t *testing.T, s string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(s) {
		xs, ys, ok := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if !ok || err1 != nil || err2 != nil || math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) {
			t.Fatalf("point %q is not two finite numbers", p)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

// seriesOf returns the series called name.
func seriesOf(t *testing.T, c chartData, name string) (chartPanel, chartSeries) {
	t.Helper()
	for _, p := range c.Panels {
		for _, s := range p.Series {
			if s.Name == name {
				return p, s
			}
		}
	}
	t.Fatalf("no series %q", name)
	return chartPanel{}, chartSeries{}
}

// TestChartScales: the unresolved operations have a panel and a scale of
// their own, so that a few of them are not flattened by a large number of
// attempts; each panel's axis is labelled with its highest value.
func TestChartScales(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	var samples []Sample
	for i, u := range []int{0, 5, 2, 0} {
		samples = append(samples, Sample{At: t0.Add(time.Duration(i) * time.Minute), Unresolved: u, Attempts: 100000 + i, ConfirmedEffects: 90000 + i})
	}
	c := chart(samples)
	if c.Empty || len(c.Panels) != 2 {
		t.Fatalf("want two panels, got %d (empty %v)", len(c.Panels), c.Empty)
	}
	up, us := seriesOf(t, c, "unresolved")
	ap, _ := seriesOf(t, c, "attempts")
	ep, _ := seriesOf(t, c, "confirmed effects")
	if up.Title == ap.Title || ap.Title != ep.Title {
		t.Errorf("unresolved shares its panel, or attempts and effects do not: %q, %q, %q", up.Title, ap.Title, ep.Title)
	}
	if up.Max != 5 || ap.Max != 100003 {
		t.Errorf("panel maxima = %d and %d, want 5 and 100003", up.Max, ap.Max)
	}
	if us.Highest != 5 || us.Last != 0 {
		t.Errorf("unresolved highest %d, last %d; want 5 and 0", us.Highest, us.Last)
	}
	pts := points(t, strings.Join(us.Lines, " "))
	lo, hi := pts[0][1], pts[0][1]
	for _, p := range pts {
		lo, hi = min(lo, p[1]), max(hi, p[1])
	}
	// 0 sits on the panel's bottom and 5 on its top: the whole height.
	if lo != float64(up.Top) || hi != float64(up.Bottom) {
		t.Errorf("unresolved spans y %v to %v, want the panel's %d to %d", lo, hi, up.Top, up.Bottom)
	}
	if up.Bottom > ap.TitleY-10 {
		t.Errorf("the panels overlap: unresolved ends at %d, the next title is at %d", up.Bottom, ap.TitleY)
	}
	if c.AxisY <= ap.Bottom || c.Height <= c.AxisY {
		t.Errorf("the time axis (%d) is not below the last panel (%d) within the chart (%d)", c.AxisY, ap.Bottom, c.Height)
	}
}

// TestChartTime: points are placed by when they were sampled, not by
// their index: a gap in the samples (a server restarted) shows as one.
func TestChartTime(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	c := chart([]Sample{{At: t0}, {At: t0.Add(time.Minute)}, {At: t0.Add(60 * time.Minute)}})
	_, s := seriesOf(t, c, "attempts")
	pts := points(t, strings.Join(s.Lines, " "))
	if pts[0][0] != chartLeft || pts[2][0] != chartRight {
		t.Errorf("the first and last samples are at x %v and %v, want the plot's %d and %d", pts[0][0], pts[2][0], chartLeft, chartRight)
	}
	want := chartLeft + float64(chartRight-chartLeft)/60
	if math.Abs(pts[1][0]-want) > 0.1 {
		t.Errorf("the sample a minute in is at x %v, want %v (a sixtieth of the way)", pts[1][0], want)
	}
}

// TestChartGaps: no line is drawn across a gap in the sampling: a server
// stopped for two hours shows as a break, not as a line through values
// nobody read.
func TestChartGaps(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	var samples []Sample
	for _, m := range []int{0, 1, 2, 3, 123, 124, 125} {
		samples = append(samples, Sample{At: t0.Add(time.Duration(m) * time.Minute), Unresolved: m})
	}
	_, s := seriesOf(t, chart(samples), "unresolved")
	if len(s.Lines) != 2 || len(points(t, s.Lines[0])) != 4 || len(points(t, s.Lines[1])) != 3 {
		t.Errorf("want two lines of 4 and 3 points, got %q", s.Lines)
	}
	// Regular sampling, however slow, is one line.
	_, s = seriesOf(t, chart([]Sample{{At: t0}, {At: t0.Add(time.Hour)}, {At: t0.Add(2 * time.Hour)}}), "unresolved")
	if len(s.Lines) != 1 {
		t.Errorf("regular samples drew %d lines", len(s.Lines))
	}
}

// TestChartDates: the time axis and caption are dated, and both ends are
// when the range crosses midnight.
func TestChartDates(t *testing.T) {
	day := time.Date(2025, 3, 1, 23, 30, 0, 0, time.UTC)
	c := chart([]Sample{{At: day}, {At: day.Add(24*time.Hour - time.Minute)}})
	if c.Range != "2025-03-01 23:30 – 2025-03-02 23:29 UTC" || c.From != "2025-03-01 23:30" || c.To != "2025-03-02 23:29 UTC" {
		t.Errorf("a day's range reads %q (%q, %q)", c.Range, c.From, c.To)
	}
	c = chart([]Sample{{At: day.Add(-time.Hour)}, {At: day}})
	if c.Range != "2025-03-01 22:30 – 23:30 UTC" {
		t.Errorf("an hour's range reads %q", c.Range)
	}
	// The times are UTC whatever the samples' zone.
	c = chart([]Sample{{At: day.In(time.FixedZone("X", 3*3600))}, {At: day.Add(time.Minute)}})
	if c.Range != "2025-03-01 23:30 – 23:31 UTC" {
		t.Errorf("a range in another zone reads %q", c.Range)
	}
}

// TestChartFinite: no sample set draws a point that is not a finite
// number: every value zero, equal times, a clock that stepped back,
// negative and huge values.
func TestChartFinite(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	for name, samples := range map[string][]Sample{
		"zeros":       {{At: t0}, {At: t0.Add(time.Minute)}},
		"same time":   {{At: t0, Unresolved: 3}, {At: t0, Unresolved: 4}},
		"step back":   {{At: t0, Attempts: 1}, {At: t0.Add(-time.Minute), Attempts: 2}},
		"negative":    {{At: t0, Unresolved: -5}, {At: t0.Add(time.Minute), Attempts: -1}},
		"huge values": {{At: t0, Attempts: math.MaxInt}, {At: t0.Add(time.Hour), Attempts: math.MaxInt, ConfirmedEffects: math.MaxInt}},
	} {
		c := chart(samples)
		for _, p := range c.Panels {
			if p.Max < 1 {
				t.Errorf("%s: panel %q has maximum %d", name, p.Title, p.Max)
			}
			for _, s := range p.Series {
				for _, pt := range points(t, strings.Join(s.Lines, " ")) {
					if pt[0] < chartLeft || pt[0] > chartRight || pt[1] < float64(p.Top) || pt[1] > float64(p.Bottom) {
						t.Errorf("%s: %s point %v is outside its panel", name, s.Name, pt)
					}
				}
			}
		}
	}
	if !chart(nil).Empty || !chart([]Sample{{At: t0}}).Empty {
		t.Error("fewer than two samples draw a chart")
	}
}
