package console

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestHumanDuration: durations read as a person says them, in their two
// largest units.
func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                "under 1 s",
		400 * time.Millisecond:           "under 1 s",
		45 * time.Second:                 "45 s",
		12*time.Minute + 5*time.Second:   "12 min 5 s",
		12 * time.Minute:                 "12 min",
		3*time.Hour + 12*time.Minute:     "3 h 12 min",
		3*time.Hour + 12*time.Minute + 9: "3 h 12 min",
		3 * time.Hour:                    "3 h",
		24 * time.Hour:                   "1 day",
		52 * time.Hour:                   "2 days 4 h",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestMeasuredTime: without a decision there is no recovery time to show
// (nor a wait without an operation awaiting approval), not a time of 0 s.
func TestMeasuredTime(t *testing.T) {
	for _, tc := range []struct {
		seconds  float64
		measured int
		want     string
	}{
		{0, 0, "–"},
		{0, 3, "under 1 s"},
		{11520, 2, "3 h 12 min"},
		{1e300, 1, "53375 days 23 h"}, // capped, not overflowed,
	} {
		if got := measuredTime(tc.seconds, tc.measured); got != tc.want {
			t.Errorf("measuredTime(%v, %d) = %q, want %q", tc.seconds, tc.measured, got, tc.want)
		}
	}
}

// TestAgo: ages by the ledger's clock, to the minute.
func TestAgo(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		-time.Hour:                   "just now",
		59 * time.Second:             "just now",
		3*time.Hour + 12*time.Minute: "3 h 12 min",
		3*time.Hour + 59*time.Second: "3 h",
		49 * time.Hour:               "2 days 1 h",
	} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago(-%s) = %q, want %q", d, got, want)
		}
	}
}

// TestVisibleText: every character that shows nothing of itself (format
// characters, default-ignorable code points) is written out; the text
// around it, right-to-left letters and visible signs included, is kept.
func TestVisibleText(t *testing.T) {
	for in, want := range map[string]string{
		"crm":                     "crm",
		"ops\u202eteam":           `ops\u202eteam`,
		"a\u200bb":                `a\u200bb`,
		"a\u200cb\u200db":         `a\u200cb\u200db`,
		"\ufeffcrm":               `\ufeffcrm`,
		"soft\u00adhyphen":        `soft\u00adhyphen`,
		"word\u2060joiner":        `word\u2060joiner`,
		"mongolian\u180e":         `mongolian\u180e`,
		"cgj\u034f":               `cgj\u034f`,
		"filler\u3164":            `filler\u3164`,
		"vs\ufe0f":                `vs\ufe0f`,
		"tag\U000e0041\U000e007f": `tag\U000e0041\U000e007f`,
		"unassigned\u2065":        `unassigned\u2065`,
		"שלום crm":                "שלום crm",
		"\u0600123":               "\u0600123",
		"tab\tand\nnewline":       "tab\tand\nnewline",
	} {
		if got := visibleText(in); got != want {
			t.Errorf("visibleText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShorten: a long list keeps its first item and its newest ones, and
// says how many it leaves out.
func TestShorten(t *testing.T) {
	items := make([]int, 301)
	for i := range items {
		items[i] = i
	}
	l := shorten(items, 100)
	if len(l.Head) != 1 || l.Head[0] != 0 || len(l.Tail) != 99 || l.Tail[0] != 202 || l.Tail[98] != 300 || l.Hidden != 201 || l.Total != 301 || l.Shown() != 100 {
		t.Errorf("shorten(301 items, 100) = head %v, tail %d from %d, hidden %d, total %d", l.Head, len(l.Tail), l.Tail[0], l.Hidden, l.Total)
	}
	l = shorten(items[:100], 100)
	if len(l.Head) != 100 || l.Tail != nil || l.Hidden != 0 || l.Total != 100 {
		t.Errorf("shorten(100 items, 100) left something out: %+v", l)
	}
}

// staleMessage names what happened and the state now, once.
func TestStaleMessage(t *testing.T) {
	t.Parallel()
	succeeded := &opledger.Operation{State: opledger.StateSucceeded}
	require.Equal(t, "The operation has changed since you opened this page: it is now succeeded (by worker-1). Yours was not recorded. Look again before deciding.",
		staleMessage(succeeded, []*opledger.TimelineEntry{{Event: "succeeded", Actor: "worker-1"}}, time.Time{}))
	cancelled := &opledger.Operation{State: opledger.StateFailed, FailureKind: opledger.FailureCancelled}
	require.Equal(t, "Another decision was recorded since you opened this page (operator cancelled, by Ana): it is now failed (cancelled). Yours was not recorded. Look again before deciding.",
		staleMessage(cancelled, []*opledger.TimelineEntry{{Event: "operator cancelled", Actor: "Ana"}}, time.Time{}))
	require.Equal(t, "The operation has changed since you opened this page: it is now held. Yours was not recorded. Look again before deciding.",
		staleMessage(&opledger.Operation{State: opledger.StateHeld}, nil, time.Time{}))
}

// guidance speaks to each state that needs a person, and to none other.
func TestGuidance(t *testing.T) {
	t.Parallel()
	for op, want := range map[*opledger.Operation]string{
		{State: opledger.StateHeld}:                                           "Look at the destination first",
		{State: opledger.StateUncertain}:                                      "Look at the destination first",
		{State: opledger.StateFailed, FailureKind: opledger.FailureRejected}:  "most likely be refused again",
		{State: opledger.StateFailed, FailureKind: opledger.FailureExhausted}: "retry limit or deadline",
		{State: opledger.StateFailed, FailureKind: opledger.FailureCancelled}: "nothing more is needed",
		{State: opledger.StatePending}:                                        "",
		{State: opledger.StateHeld, Tombstoned: true}:                         "",
		{State: opledger.StateSucceeded}:                                      "",
	} {
		if want == "" {
			require.Empty(t, guidance(op, false, reconcilerUnknown), op.State)
			continue
		}
		require.Contains(t, string(guidance(op, false, reconcilerUnknown)), want, op.State)
		if op.State != opledger.StateUncertain {
			// What a reconciler does is no matter for the others.
			for _, rec := range []reconcilerKnows{reconcilerServes, reconcilerNone} {
				require.Equal(t, guidance(op, false, reconcilerUnknown), guidance(op, false, rec), op.State)
			}
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven runes", 10, "eleven ru…"},
		{"ends with space here", 10, "ends with…"},
		{"ééééééééééé", 5, "éééé…"},
	} {
		got := clip(tc.in, tc.n)
		require.Equal(t, tc.want, got, tc.in)
		require.LessOrEqual(t, utf8.RuneCountInString(got), tc.n)
	}
}
