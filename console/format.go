package console

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// humanDuration writes d in its two largest units, as a person reads it:
// "45 s", "12 min 5 s", "3 h 12 min", "2 days 4 h". A second unit of zero
// is left out ("3 h"); under a second is "under 1 s".
func humanDuration(d time.Duration) string {
	if d < time.Second {
		return "under 1 s"
	}
	days := int64(d / (24 * time.Hour))
	h := int64(d % (24 * time.Hour) / time.Hour)
	m := int64(d % time.Hour / time.Minute)
	s := int64(d % time.Minute / time.Second)
	two := func(a int64, aUnit string, b int64, bUnit string) string {
		out := strconv.FormatInt(a, 10) + " " + aUnit
		if b > 0 {
			out += " " + strconv.FormatInt(b, 10) + " " + bUnit
		}
		return out
	}
	switch {
	case days > 0:
		unit := "days"
		if days == 1 {
			unit = "day"
		}
		return two(days, unit, h, "h")
	case h > 0:
		return two(h, "h", m, "min")
	case m > 0:
		return two(m, "min", s, "s")
	}
	return strconv.FormatInt(s, 10) + " s"
}

// ago is how long before now t was, to the minute ("just now" under a
// minute, and for a t after now, which a clock a little ahead can give).
// now is the ledger's clock, so that ages agree with the times the ledger
// records.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < time.Minute {
		return "just now"
	}
	return humanDuration(d.Truncate(time.Minute))
}

// measuredTime writes a figure of the dashboard in seconds (an operator
// recovery, the longest wait for an approval): "–" when nothing was
// measured (no decision was taken, no operation awaits approval).
func measuredTime(seconds float64, measured int) string {
	if measured == 0 || math.IsNaN(seconds) || seconds < 0 {
		return "–"
	}
	seconds = min(seconds, float64(math.MaxInt64/2)/float64(time.Second)) // no Duration overflow
	return humanDuration(time.Duration(seconds * float64(time.Second)))
}

// shownItems bounds how many timeline entries, attempts, deliveries and
// produced operations a page lists.
const shownItems = 100

// shortList is a list as a page shows it: whole when it has at most
// shownItems items; otherwise its first item (the operation's recording,
// its first attempt, the event's first delivery) and its newest
// shownItems-1, with how many between are left out.
type shortList[T any] struct {
	Head, Tail []T
	// Hidden counts the items left out between Head and Tail.
	Hidden int
	// Total counts every item.
	Total int
}

// shorten makes the shortList of items, which are oldest first.
func shorten[T any](items []T, n int) shortList[T] {
	if len(items) <= n || n < 2 {
		return shortList[T]{Head: items, Total: len(items)}
	}
	return shortList[T]{Head: items[:1], Tail: items[len(items)-(n-1):], Hidden: len(items) - n, Total: len(items)}
}

// Shown counts the items the page shows.
func (l shortList[T]) Shown() int { return len(l.Head) + len(l.Tail) }

// isInvisible reports whether r changes or hides text without showing
// itself: the format characters (Unicode category Cf: the bidi controls,
// zero-width space and joiners, the byte order mark, the soft hyphen, tag
// characters, …) and the other default-ignorable code points (variation
// selectors, Hangul fillers, the combining grapheme joiner, unassigned
// ones). The prepended concatenation marks (U+0600, …) are format
// characters too, but visible signs of the text they precede, and kept.
func isInvisible(r rune) bool {
	if r < 0x80 {
		return false
	}
	return unicode.Is(unicode.Cf, r) && !unicode.Is(unicode.Prepended_Concatenation_Mark, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || unicode.Is(unicode.Variation_Selector, r)
}

// visibleText returns s with each invisible character (isInvisible)
// written out as its escape, as Go and the command line write it (U+202E
// as \u202e, U+E0041 as \U000e0041): stored text is shown as it is, but
// can neither turn what surrounds it around nor hold characters nobody
// sees, so two values that look the same are the same.
func visibleText(s string) string {
	if !strings.ContainsFunc(s, isInvisible) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !isInvisible(r):
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			fmt.Fprintf(&b, "\\U%08x", r)
		}
	}
	return b.String()
}

// clip shortens s to at most n characters (runes), the last of them an
// ellipsis when some were left out: a free text in a row of a list, whose
// page shows it whole.
func clip(s string, n int) string {
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRightFunc(string(r[:n-1]), unicode.IsSpace) + "…"
}
