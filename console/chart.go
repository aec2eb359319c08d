package console

import (
	"fmt"
	"strings"
)

// chartData is an SVG line chart of the samples, drawn on the server so the
// page needs no script to show it.
type chartData struct {
	Width, Height int
	Series        []chartSeries
	From, To      string
	Empty         bool
}

type chartSeries struct {
	Name   string
	Class  string
	Points string // SVG polyline points
	Last   int
}

func chart(samples []Sample) chartData {
	const w, h, pad = 600, 160, 4
	c := chartData{Width: w, Height: h, Empty: len(samples) < 2}
	if c.Empty {
		return c
	}
	c.From = samples[0].At.UTC().Format("15:04")
	c.To = samples[len(samples)-1].At.UTC().Format("15:04 UTC")
	series := []struct {
		name, class string
		get         func(Sample) int
	}{
		{"unresolved", "s-unresolved", func(s Sample) int { return s.Unresolved }},
		{"attempts", "s-attempts", func(s Sample) int { return s.Attempts }},
		{"confirmed effects", "s-effects", func(s Sample) int { return s.ConfirmedEffects }},
	}
	top := 1
	for _, s := range samples {
		for _, se := range series {
			top = max(top, se.get(s))
		}
	}
	for _, se := range series {
		var b strings.Builder
		for i, s := range samples {
			x := pad + float64(i)*float64(w-2*pad)/float64(len(samples)-1)
			y := float64(h-pad) - float64(se.get(s))*float64(h-2*pad)/float64(top)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		c.Series = append(c.Series, chartSeries{Name: se.name, Class: se.class, Points: strings.TrimSpace(b.String()),
			Last: se.get(samples[len(samples)-1])})
	}
	return c
}
