package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// scrollRegion is what the page of a browser shows of a .scroll box.
type scrollRegion struct {
	Overflows bool    // wider content than the box
	Role      string  // its role attribute
	TabIndex  int     // its tabIndex property
	Label     string  // its aria-label
	HintShown bool    // its "scroll sideways" caption is visible
	HintLeft  float64 // the caption's left edge, from the box's
	HintRight float64 // the caption's right edge, from the viewport's left
}

// regionOf reads the scroll box sel in the page of ctx.
func regionOf(t *testing.T, ctx context.Context, sel string) scrollRegion {
	t.Helper()
	return eval[scrollRegion](t, ctx, fmt.Sprintf(`(() => {
		const r = document.querySelector(%q), h = r.querySelector('.scroll-hint');
		const hr = h.getBoundingClientRect(), rr = r.getBoundingClientRect();
		return {Overflows: r.scrollWidth > r.clientWidth, Role: r.getAttribute('role') || '', TabIndex: r.tabIndex,
			Label: r.getAttribute('aria-label') || '',
			HintShown: getComputedStyle(h).visibility === 'visible' && hr.height > 0 && h.textContent.includes('Scroll sideways'),
			HintLeft: hr.left - rr.left, HintRight: hr.right};
	})()`, sel))
}

// TestPhoneScrollRegions: at 390 px the dashboard's state table and an
// operation's attempts are wider than the screen: each scrolls in a box
// that is a labelled, focusable region, says that it scrolls sideways
// (and keeps saying it, in view, once scrolled), and scrolls with the
// arrow keys once focused; the page itself stays as wide as the screen.
// On a desktop screen the state table fits, and says nothing of the kind.
func TestPhoneScrollRegions(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	ctx := browser(t)
	browserSignIn(t, ctx, b.url, b.token)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)))
	for _, tc := range []struct{ path, region, label string }{
		{"/dashboard", "#states-region", "Operations by state"},
		{"/operations/order:17:prepare", "#attempts-region", "Attempts"},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+tc.path), chromedp.WaitVisible(tc.region+" table")))
		require.LessOrEqual(t, eval[int](t, ctx, `document.documentElement.scrollWidth`), 391, "%s: the page fits the screen", tc.path)
		r := regionOf(t, ctx, tc.region)
		require.True(t, r.Overflows, "%s: the table is wider than a phone (else this test shows nothing)", tc.path)
		require.Equal(t, "region", r.Role, tc.path)
		require.Equal(t, 0, r.TabIndex, "%s: focusable in the tab order", tc.path)
		require.Equal(t, tc.label, r.Label, tc.path)
		require.True(t, r.HintShown, "%s: the box says it scrolls sideways", tc.path)

		// Focused, the box scrolls with the arrow keys; the caption
		// stays in the visible part of the box.
		require.True(t, eval[bool](t, ctx, fmt.Sprintf(`document.querySelector(%q).focus(), document.activeElement === document.querySelector(%q)`, tc.region, tc.region)),
			"%s: the box takes the focus", tc.path)
		require.NoError(t, chromedp.Do(ctx, chromedp.KeyEvent(kb.ArrowRight)))
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector(%q).scrollLeft > 0`, tc.region)))
		require.NoError(t, err, "%s: the right arrow scrolls the box", tc.path)
		eval[bool](t, ctx, fmt.Sprintf(`(r => (r.scrollLeft = r.scrollWidth, true))(document.querySelector(%q))`, tc.region))
		r = regionOf(t, ctx, tc.region)
		require.True(t, r.HintShown, "%s: scrolled to the end, the caption is still shown", tc.path)
		require.InDelta(t, 0, r.HintLeft, 1, "%s: the caption stays at the box's left edge", tc.path)
		require.LessOrEqual(t, r.HintRight, 391.0, "%s: the caption is on the screen", tc.path)
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(b.url+"/dashboard"), chromedp.WaitVisible(`#states-region table`)))
	r := regionOf(t, ctx, "#states-region")
	require.False(t, r.Overflows, "the state table fits a desktop screen")
	require.False(t, r.HintShown, "no caption when nothing scrolls")
}

// chartText is what a browser shows of the dashboard chart's labels.
type chartText struct {
	Labels    int      // text elements in the chart
	Smallest  float64  // the smallest label's size on the screen, in CSS px
	FontSizes []string // each label's computed font-size (in the SVG's units)
	SVGWidth  float64  // the chart's width on the screen
	BoxWidth  float64  // the width of the box it scrolls in
	Overflows bool     // the chart is wider than its box
}

// TestChartLabelsReadable: the dashboard chart's labels are at least
// 11 px on the screen of a phone (an SVG scaled down to a phone's width
// made them about 5 px), the chart scrolling sideways in a labelled,
// focusable box if need be, with the page as wide as the screen; on a
// desktop screen the chart is drawn as before, as wide as the page, its
// labels 11 units of it.
func TestChartLabelsReadable(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	heldOp(t, l, opledger.Intent{Key: "held:1"}, "timeout", "no lookup")
	require.NoError(t, c.Sample(context.Background()))
	require.NoError(t, c.Sample(context.Background()))
	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)
	read := func() chartText {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/dashboard"), chromedp.WaitVisible(`#chart-region svg`)))
		return eval[chartText](t, ctx, `(() => {
			const box = document.querySelector('#chart-region'), svg = box.querySelector('svg');
			const texts = [...svg.querySelectorAll('text')];
			const sizes = texts.map(e => parseFloat(getComputedStyle(e).fontSize) * e.getScreenCTM().a);
			return {Labels: texts.length, Smallest: Math.min(...sizes), FontSizes: texts.map(e => getComputedStyle(e).fontSize),
				SVGWidth: svg.getBoundingClientRect().width, BoxWidth: box.clientWidth, Overflows: box.scrollWidth > box.clientWidth};
		})()`)
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)))
	phone := read()
	require.Greater(t, phone.Labels, 4, "titles, scales and times")
	require.GreaterOrEqual(t, phone.Smallest, 11.0, "the smallest chart label on a phone, in px")
	require.LessOrEqual(t, eval[int](t, ctx, `document.documentElement.scrollWidth`), 391, "the page fits the screen")
	r := regionOf(t, ctx, "#chart-region")
	require.Equal(t, "region", r.Role)
	require.Equal(t, 0, r.TabIndex)
	require.NotEmpty(t, r.Label)
	require.Equal(t, phone.Overflows, r.HintShown, "the caption shows exactly when the chart scrolls")

	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))
	desk := read()
	for _, fs := range desk.FontSizes {
		require.Equal(t, "11px", fs, "desktop labels as before")
	}
	require.False(t, desk.Overflows, "the chart fits a desktop screen")
	require.InDelta(t, desk.BoxWidth, desk.SVGWidth, 1, "as wide as the page, as before")
	require.False(t, regionOf(t, ctx, "#chart-region").HintShown)
}

// labAttempts is the attempts counter of scenario normal on the lab page.
func labAttempts(t *testing.T, s *consoleSession) string {
	t.Helper()
	return regexpFind(t, `id="normal-attempts">(\d+)<`, s.get("/lab"))
}

// TestLabResetConfirms: the lab's Reset asks first. Its button opens a
// confirmation (a GET, which changes nothing and carries no CSRF token
// in the address); a reset posted without confirm=yes (a lab page from
// before) answers that confirmation and changes nothing either; the
// confirming form carries the session's CSRF token, is refused without
// it, and only it resets the scenario. "Keep it" goes back to the
// scenario.
func TestLabResetConfirms(t *testing.T) {
	t.Parallel()
	_, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/lab")
	csrf := regexpFind(t, `name="csrf" value="([0-9a-f]+)"`, page)
	require.Regexp(t, `<form method="get" action="/lab/normal/reset" class="inline">\s*<button type="submit" class="danger" id="normal-reset">`, page,
		"Reset opens the confirmation, with no token in the address")
	status, _ := s.post("/lab/normal", url.Values{"step": {"send"}, "csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "1", labAttempts(t, s))
	// The first counter is the automation's requests to opledger, not the
	// ledger's attempts (calls to the CRM), which the page names apart.
	lab := s.get("/lab")
	require.Contains(t, lab, `<span class="l">requests to opledger</span>`)
	require.Contains(t, lab, `<span class="tag">requests 1 · actions 1 · verifications 0</span>`)
	require.NotContains(t, lab, "attempts sent")

	confirm := s.get("/lab/normal/reset")
	require.Contains(t, confirm, "<h1 id=\"reset-title\">Reset “Normal”?</h1>")
	require.Contains(t, confirm, "discards the 1 step played in this scenario and its counters (1 request to opledger, 1 action at the CRM, 0 verifications)")
	require.Regexp(t, `<form method="post" action="/lab/normal" class="confirm">\s*<input type="hidden" name="csrf" value="`+csrf+`">\s*`+
		`<input type="hidden" name="do" value="reset">\s*<input type="hidden" name="confirm" value="yes">`, confirm)
	require.Contains(t, confirm, `<a class="button" href="/lab#normal" id="reset-keep">Keep it</a>`)
	require.Equal(t, "1", labAttempts(t, s), "asking resets nothing")

	status, body := s.post("/lab/normal", url.Values{"do": {"reset"}, "csrf": {csrf}})
	require.Equal(t, http.StatusOK, status, "an unconfirmed reset asks")
	require.Contains(t, body, `id="reset-confirm"`)
	require.Equal(t, "1", labAttempts(t, s), "an unconfirmed reset resets nothing")

	status, _ = s.post("/lab/normal", url.Values{"do": {"reset"}, "confirm": {"yes"}, "csrf": {"0000"}})
	require.Equal(t, http.StatusForbidden, status, "the confirmation needs the CSRF token")
	require.Equal(t, "1", labAttempts(t, s))

	resp, err := s.hc.PostForm(srv.URL+"/lab/normal", url.Values{"do": {"reset"}, "confirm": {"yes"}, "csrf": {csrf}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/lab#normal", resp.Header.Get("Location"))
	require.Equal(t, "0", labAttempts(t, s), "the confirmed reset resets")

	status, _ = s.fetch("/lab/nope/reset")
	require.Equal(t, http.StatusNotFound, status)
}

// regexpFind is the first group of pattern's first match in s.
func regexpFind(t *testing.T, pattern, s string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(s)
	require.Len(t, m, 2, "%s in the page", pattern)
	return m[1]
}
