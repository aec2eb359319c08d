package console_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// shownTime is a <time> element as a browser reads it.
type shownTime struct {
	Text     string `json:"text"`
	DateTime string `json:"datetime"`
	Title    string `json:"title"`
}

// TestTimesCarryExactTime: in a browser, every time a page shows is a
// <time> whose datetime is the exact time in RFC 3339 UTC, the
// timeline's included; an age ("3 h 12 min", "just now") also says the
// exact time in its title, so an operator can tell when it was.
func TestTimesCarryExactTime(t *testing.T) {
	t.Parallel()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	ctx := context.Background()
	heldOp(t, l, opledger.Intent{Key: "time:1", Owner: "ops"}, "timeout", "no lookup")
	putWorkflow(t, l, "onb:1", "", "")
	offset.Add(int64(3*time.Hour + 12*time.Minute))
	op, err := l.Get(ctx, "time:1")
	require.NoError(t, err)
	wf, err := l.GetWorkflow(ctx, "onb:1")
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	bctx := browser(t)
	browserSignIn(t, bctx, srv.URL, token)

	times := func(path, sel string) []shownTime {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+path), chromedp.WaitVisible(`h1`)))
		return eval[[]shownTime](t, bctx, `[...document.querySelectorAll(`+"`"+sel+"`"+`)].map(e => ({text: e.textContent,
			datetime: e.getAttribute('datetime') ?? '', title: e.getAttribute('title') ?? ''}))`)
	}
	rfc3339 := func(at time.Time) string { return at.UTC().Format(time.RFC3339) }
	exact := func(at time.Time) string { return at.UTC().Format("2006-01-02 15:04:05 UTC") }
	age := func(at time.Time, text string) shownTime {
		return shownTime{Text: text, DateTime: rfc3339(at), Title: exact(at)}
	}

	// The queue's wait, and the operations list's age and last change.
	require.Equal(t, []shownTime{age(*op.UnresolvedSince, "3 h 12 min")}, times("/", `td[data-label="Waiting"] time`))
	require.Equal(t, []shownTime{age(op.CreatedAt, "3 h 12 min")}, times("/operations?state=held", `td[data-label="Age"] time`))
	require.Equal(t, []shownTime{age(op.UpdatedAt, "3 h 12 min")}, times("/operations?state=held", `td[data-label="Updated"] time`))
	require.Equal(t, []shownTime{age(wf.UpdatedAt, "3 h 12 min")}, times("/workflows", `td[data-label="Updated"] time`))

	// The timeline of the operation's page: each entry's time.
	timeline, err := l.Timeline(ctx, "time:1")
	require.NoError(t, err)
	shown := times("/operations/time:1", `#timeline time`)
	require.Len(t, shown, len(timeline))
	for i, e := range timeline {
		require.Equal(t, exact(e.At), shown[i].Text)
		require.Equal(t, rfc3339(e.At), shown[i].DateTime, "entry %d", i)
	}
	// The page's other times too.
	for _, tm := range times("/operations/time:1", `dd time`) {
		at, err := time.Parse(time.RFC3339, tm.DateTime)
		require.NoError(t, err, "datetime of %q", tm.Text)
		require.Equal(t, exact(at), tm.Text)
	}
}
