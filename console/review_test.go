package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
)

// countingServer serves a console over HTTP on 127.0.0.1 and counts the
// decisions posted to it.
type countingServer struct {
	url   string
	posts atomic.Int64
}

func serveCounting(t *testing.T, h http.Handler) *countingServer {
	t.Helper()
	cs := &countingServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/resolve") {
			cs.posts.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cs.url = srv.URL
	return cs
}

// heldOp records the operation in, sends it once and holds it: the
// attempt ended uncertain with lastError and the reconciler found nothing.
func heldOp(t *testing.T, l *opledger.Ledger, in opledger.Intent, lastError, evidence string) {
	t.Helper()
	ctx := context.Background()
	if in.Action == "" {
		in.Action, in.Destination = "crm.create", "crm"
	}
	if in.Payload == nil {
		in.Payload = json.RawMessage(`{}`)
	}
	cl, err := l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, in.Key, cl.AttemptID, cl.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, in.Key, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: lastError})
	require.NoError(t, err)
	_, _, err = l.Reconcile(ctx, in.Key, opledger.Finding{Evidence: evidence})
	require.NoError(t, err)
}

// browserSignIn signs the browser of ctx in to the console at base.
func browserSignIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/login"), chromedp.WaitVisible(`#token`),
		chromedp.SetValue(`#token`, token), chromedp.Submit(`#token`), shown(`table.queue, p.empty`)))
}

// eval evaluates js in the page of ctx.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	require.NoError(t, err)
	return v
}

// pageText is the text of the first element matching sel.
func pageText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Text(sel))
	require.NoError(t, err)
	return strings.TrimSpace(v)
}

var (
	csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
	seenField = regexp.MustCompile(`name="seen" value="([^"]+)"`)
)

// formOf returns the CSRF token and the seen field of an operation page.
func formOf(t *testing.T, page string) (csrf, seen string) {
	t.Helper()
	c := csrfField.FindStringSubmatch(page)
	require.Len(t, c, 2, "the page has a CSRF token")
	s := seenField.FindStringSubmatch(page)
	require.Len(t, s, 2, "the page has a decision form")
	return c[1], html.UnescapeString(s[1])
}

// decide posts a decision on the operation key from its page as it is now,
// with the page's CSRF token and seen field, and requires the redirect
// that follows a recorded decision.
func (s *consoleSession) decide(key string, form url.Values) {
	s.t.Helper()
	csrf, seen := formOf(s.t, s.get("/operations/"+key))
	form.Set("csrf", csrf)
	form.Set("seen", seen)
	code, body := s.post("/operations/"+key+"/resolve", form)
	require.Equal(s.t, http.StatusSeeOther, code, body)
}

// TestStaleDecision: two operators have the same held operation open; the
// first cancels it, and the second's "authorize retry", sent from the page
// as it was, is refused with 409 and the operation as it is now, inside
// the retry form, focused, with what was typed. The refused page's address
// is the operation's, so a reload reads it again and posts nothing.
func TestStaleDecision(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "stale:1"}, "timeout", "no lookup")
	srv := serveCounting(t, c)
	a := browser(t)
	browserSignIn(t, a, srv.url, token)
	b, cancel := chromedp.NewContext(a) // a second tab of the same browser
	defer cancel()

	page := srv.url + "/operations/stale:1"
	require.NoError(t, chromedp.Do(a, chromedp.Navigate(page), chromedp.WaitVisible(`#decide-cancel`)))
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(page), chromedp.WaitVisible(`#decide-retry`)))

	require.NoError(t, chromedp.Do(a, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#reason-c`, "the customer withdrew the order"), chromedp.SendKeys(`#op-c`, "Ana"),
		chromedp.Click(`#decide-cancel`), shown(`p.notice`)))
	require.Equal(t, "Recorded: cancelled.", pageText(t, a, `p.notice`))

	require.NoError(t, chromedp.Do(b, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#reason-r`, "not in the CRM, send it again"), chromedp.SendKeys(`#op-r`, "Ben")))
	resp, err := chromedp.RunResponse(b, chromedp.Click(`#decide-retry`))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusConflict, resp.Status)
	require.NoError(t, chromedp.Do(b, chromedp.WaitVisible(`#err-r`)))

	op, err := l.Get(context.Background(), "stale:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateFailed, op.State, "the cancellation stands")
	require.Equal(t, opledger.FailureCancelled, op.FailureKind)
	require.Equal(t, "Another decision was recorded since you opened this page (operator cancelled, by "+consoleActor(t, l, token, "Ana")+"): it is now failed (cancelled). Yours was not recorded. Look again before deciding.",
		pageText(t, b, `form:has(#decide-retry) #err-r`), "the refusal is inside the retry form")
	require.Contains(t, pageText(t, b, `h1`), "failed (cancelled)", "the page shows the operation as it is now")
	require.Equal(t, "err-r", eval[string](t, b, `document.activeElement.id`), "the refusal has the focus")
	require.Equal(t, "err-r", eval[string](t, b, `document.querySelector('#decide-retry').getAttribute('aria-describedby')`))
	require.Equal(t, []string{"not in the CRM, send it again", "Ben"},
		eval[[]string](t, b, `[document.querySelector('#reason-r').value, document.querySelector('#op-r').value]`), "what was typed is kept")
	require.Equal(t, op.UpdatedAt.UTC().Format(time.RFC3339Nano),
		eval[string](t, b, `document.querySelector('form:has(#decide-retry) input[name=seen]').value`), "the form now names the operation as shown")

	// The address is the operation's: a reload reads it, posts nothing.
	require.Equal(t, "/operations/stale:1", eval[string](t, b, `location.pathname`))
	require.EqualValues(t, 2, srv.posts.Load())
	require.NoError(t, chromedp.Do(b, chromedp.Reload(), chromedp.WaitVisible(`#decide-retry`)))
	require.EqualValues(t, 2, srv.posts.Load(), "the reload posted nothing")
	require.False(t, eval[bool](t, b, `!!document.querySelector('p.error')`), "the reload shows the operation, no refusal")

	timeline, err := l.Timeline(context.Background(), "stale:1")
	require.NoError(t, err)
	last := timeline[len(timeline)-1]
	require.Equal(t, "operator cancelled", last.Event, "nothing recorded after the cancellation")
	require.Equal(t, consoleActor(t, l, token, "Ana"), last.Actor)
}

// TestBackAfterDecision: the Back button shows an operation as it is
// now, not the decision forms of the state it had: after a decision taken
// on its page, and after another operator decided while this one looked
// at the queue (a page restored from the back/forward cache is read
// again).
func TestBackAfterDecision(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "back:1"}, "timeout", "no lookup")
	heldOp(t, l, opledger.Intent{Key: "back:2"}, "timeout", "no lookup")
	srv := serveCounting(t, c)
	ctx := browser(t)
	browserSignIn(t, ctx, srv.url, token)
	back := func() {
		t.Helper()
		bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(bctx, chromedp.NavigateBack(), chromedp.WaitVisible(`h1`)), "Back loads the page again")
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`a[href="/operations/back:1"]`), shown(`#decide-cancel`)))
	require.Contains(t, pageText(t, ctx, `h1`), "held")
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#reason-c`, "withdrawn"), chromedp.Click(`#decide-cancel`), shown(`p.notice`)))
	back()
	require.Equal(t, "/operations/back:1", eval[string](t, ctx, `location.pathname`))
	require.Contains(t, pageText(t, ctx, `h1`), "failed (cancelled)", "Back shows the operation as it is now")
	require.False(t, eval[bool](t, ctx, `!!document.querySelector('#decide-cancel')`), "no form of the state it had")

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/operations/back:2"), chromedp.WaitVisible(`#decide-cancel`),
		chromedp.Click(`nav a[href="/"]`), shown(`table.queue`)))
	_, _, err := l.Resolve(context.Background(), "back:2", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn", Operator: "ana"})
	require.NoError(t, err)
	back()
	require.Equal(t, "/operations/back:2", eval[string](t, ctx, `location.pathname`))
	require.Contains(t, pageText(t, ctx, `h1`), "failed (cancelled)", "Back shows the operation as it is now")
	require.EqualValues(t, 1, srv.posts.Load())
}

// TestDecisionNeedsSeen: a decision must name the operation as its page
// showed it: without the field (a page of an older console), with another
// time, or with a time that is not one, nothing is recorded; with the
// page's own it is. Every signed-in response is no-store.
func TestDecisionNeedsSeen(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "seen:1"}, "timeout", "no lookup")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	page := s.get("/operations/seen:1")
	csrf, seen := formOf(t, page)
	op, err := l.Get(context.Background(), "seen:1")
	require.NoError(t, err)
	parsed, err := time.Parse(time.RFC3339Nano, seen)
	require.NoError(t, err)
	require.True(t, parsed.Equal(op.UpdatedAt), "the form names UpdatedAt exactly: %s vs %s", seen, op.UpdatedAt)

	for _, bad := range []string{"", "yesterday", parsed.Add(-time.Nanosecond).Format(time.RFC3339Nano)} {
		form := url.Values{"csrf": {csrf}, "decision": {"authorize_retry"}, "reason": {"checked"}}
		if bad != "" {
			form.Set("seen", bad)
		}
		code, body := s.post("/operations/seen:1/resolve", form)
		require.Equal(t, http.StatusConflict, code, "seen %q", bad)
		require.Regexp(t, `id="err-r"[^>]*>[^<]*(older page|Look again before deciding)`, body)
		now, err := l.Get(context.Background(), "seen:1")
		require.NoError(t, err)
		require.Equal(t, opledger.StateHeld, now.State, "nothing recorded with seen %q", bad)
	}
	code, _ := s.post("/operations/seen:1/resolve", url.Values{"csrf": {csrf}, "decision": {"authorize_retry"}, "reason": {"checked"}, "seen": {seen}})
	require.Equal(t, http.StatusSeeOther, code)
	op, err = l.Get(context.Background(), "seen:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)

	// No signed-in page is kept by the browser.
	for _, path := range []string{"/", "/operations/seen:1", "/dashboard", "/events", "/workflows", "/lab", "/login"} {
		resp, err := s.hc.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), path)
	}
	resp, err := s.hc.PostForm(srv.URL+"/operations/seen:1/resolve", url.Values{"csrf": {csrf}, "decision": {"cancel"}, "reason": {"x"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "a refused decision")
}

// TestSignOutBack: after signing out, the Back button does not show the
// page that was open: it is fetched again, and the console asks to sign
// in.
func TestSignOutBack(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "out:1", Payload: json.RawMessage(`{"note":"confidential"}`)}, "timeout", "no lookup")
	srv := serveCounting(t, c)
	ctx := browser(t)
	browserSignIn(t, ctx, srv.url, token)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/operations/out:1"), chromedp.WaitVisible(`pre.payload`),
		chromedp.Click(`form.logout button`), shown(`#token`)))
	require.NoError(t, chromedp.Do(ctx, chromedp.NavigateBack(), chromedp.WaitVisible(`#token`)))
	require.Equal(t, "/login", eval[string](t, ctx, `location.pathname`))
	require.NotContains(t, pageText(t, ctx, `body`), "confidential")
}

// TestSameSiteSignIn: a page of another origin of the same site (another
// port of 127.0.0.1) that posts a sign-in form with its own tenant's token
// is refused: the visitor stays signed in to their own tenant.
func TestSameSiteSignIn(t *testing.T) {
	t.Parallel()
	b := start(t)
	ctx := context.Background()
	evil, err := b.ledger.WithTenant("evil")
	require.NoError(t, err)
	evilToken, _, err := evil.CreateToken(ctx, "evil", opledger.ReadWrite)
	require.NoError(t, err)
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>prize</title><form id="f" method="post" action="%s/login">
<input name="token" value="%s"><input name="next" value="/"></form><script>document.getElementById("f").submit()</script>`,
			html.EscapeString(b.url), html.EscapeString(evilToken))
	}))
	defer attacker.Close()
	require.NotEqual(t, attacker.URL, b.url, "another origin")

	bctx := browser(t)
	browserSignIn(t, bctx, b.url, b.token)
	require.Equal(t, "acme", pageText(t, bctx, `.tenant strong`))
	nav, err := chromedp.RunResponse(bctx, chromedp.Navigate(attacker.URL))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusOK, nav.Status)
	require.NoError(t, chromedp.Do(bctx, shown(`p.error, .tenant strong`)))
	require.Equal(t, "Sign in from the console's own page.", pageText(t, bctx, `p.error`))
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(`.tenant strong`)))
	require.Equal(t, "acme", pageText(t, bctx, `.tenant strong`), "still the visitor's own tenant")

	// Every POST from another origin is refused, even with a valid CSRF
	// token; the console's own origin, and clients that send neither
	// header, are served.
	b.seed(t)
	s := signIn(t, b.url, b.token)
	csrf, seen := formOf(t, s.get("/operations/intake:I17:create"))
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "same-site"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "http://127.0.0.1:1"},
	} {
		req, err := http.NewRequest(http.MethodPost, b.url+"/operations/intake:I17:create/resolve",
			strings.NewReader(url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"cancel"}, "reason": {"forged"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := s.hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%v", h)
		req, err = http.NewRequest(http.MethodPost, b.url+"/login", strings.NewReader(url.Values{"token": {evilToken}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "sign-in %v", h)
	}
	op, err := b.ledger.Get(ctx, "intake:I17:create")
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State, "nothing recorded")
	req, err := http.NewRequest(http.MethodPost, b.url+"/operations/intake:I17:create/resolve",
		strings.NewReader(url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"cancel"}, "reason": {"same origin"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := s.hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the console's own page")
}

// TestNotice: the notice of a decision is the console's own text, shown
// once after the decision; no link can put text there.
func TestNotice(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "note:1"}, "timeout", "no lookup")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	for _, q := range []string{"?done=Recorded:+succeeded", "?done=mark_succeeded", "?done=Call+the+helpdesk+to+confirm"} {
		page := s.get("/operations/note:1" + q)
		require.NotContains(t, page, `class="notice"`, q)
		require.NotContains(t, page, "Recorded:", q)
		require.NotContains(t, page, "helpdesk", q)
	}
	// Nor can a page that shares the host set the notice cookie itself:
	// its value is signed with the session.
	u, err := url.Parse(srv.URL + "/operations/")
	require.NoError(t, err)
	s.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "opledger_notice", Value: "mark_succeeded~note:1", Path: "/operations/"}})
	require.NotContains(t, s.get("/operations/note:1"), "Recorded:", "a forged notice cookie")
	csrf, seen := formOf(t, s.get("/operations/note:1"))
	form := url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"mark_succeeded"}, "ref": {"CRM-1"}, "reason": {"found it"}}
	code, body := s.post("/operations/note:1/resolve", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Contains(t, s.get("/operations/note:1"), `<p class="notice" role="status">Recorded: succeeded, with the reference you found.</p>`)
	require.NotContains(t, s.get("/operations/note:1"), "Recorded:", "once")
	// The same form sent again (a double click, a resend after a lost
	// answer): the ledger recorded nothing, and the page says so.
	before, err := l.Timeline(context.Background(), "note:1")
	require.NoError(t, err)
	code, body = s.post("/operations/note:1/resolve", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	page := s.get("/operations/note:1")
	require.Contains(t, page, `<p class="notice" role="status">Already recorded: this decision had been made, so nothing changed.</p>`)
	require.NotContains(t, page, "Recorded: succeeded")
	after, err := l.Timeline(context.Background(), "note:1")
	require.NoError(t, err)
	require.Len(t, after, len(before))
}

// TestBidiText: bidi controls in stored text are shown as escapes and
// each stored value is isolated, so none reorders what is beside it.
func TestBidiText(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-\u202e7"})
	heldOp(t, l, opledger.Intent{Key: "bidi:1", Owner: "ops\u202emaet", Destination: "crm", Action: "crm.cr\u2066eate\u2069",
		Payload: json.RawMessage("{\"note\":\"\u202eabc\"}")},
		"timeout \u202eafter 10 s", "no lookup \u2067here\u2069")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	s.decide("bidi:1", url.Values{"decision": {"cancel"}, "reason": {"withdrawn \u202bby\u202c the customer"}, "operator": {"Maria\u202e"}})

	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)
	controls := `/[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]/`
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/operations/bidi:1"), chromedp.WaitVisible(`#timeline`)))
	require.False(t, eval[bool](t, ctx, controls+`.test(document.querySelector('main').innerText)`), "no bidi control reaches the page")
	main := pageText(t, ctx, `main`)
	for _, want := range []string{`ops\u202emaet`, `crm.cr\u2066eate\u2069`, `timeout \u202eafter 10 s`, `withdrawn \u202bby\u202c the customer`, "by " + consoleActor(t, l, token, `Maria\u202e`), `worker-\u202e7`, `{"note":"\u202eabc"}`} {
		require.Contains(t, main, want)
	}
	require.Equal(t, consoleActor(t, l, token, `Maria\u202e`), pageText(t, ctx, `#timeline li:last-child .actor bdi`), "the actor is isolated")
	require.True(t, eval[bool](t, ctx, `[...document.querySelectorAll('#timeline .evidence')].every(e => e.firstElementChild && e.firstElementChild.tagName === 'BDI')`))

	heldOp(t, l, opledger.Intent{Key: "bidi:2", Owner: "\u202eowner"}, "\u2066error", "x")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`table.queue`)))
	require.False(t, eval[bool](t, ctx, controls+`.test(document.querySelector('main').innerText)`), "nor the queue")
	require.Equal(t, `\u202eowner`, pageText(t, ctx, `table.queue tbody tr:first-child td:nth-child(3) bdi`))
}

// TestFailedDecisionForm: a refused decision is shown in its own form,
// with what was typed, the field marked invalid, described by the message
// and focused; the page's address is the operation's, so a reload posts
// nothing. Without script the same holds but the reload; with it, a
// reason of spaces is refused before it is sent.
func TestFailedDecisionForm(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "form:1"}, "timeout", "no lookup")
	srv := serveCounting(t, c)
	ctx := browser(t)
	browserSignIn(t, ctx, srv.url, token)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/operations/form:1"), chromedp.WaitVisible(`#decide-succeeded`),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`)))
	require.Equal(t, []string{"200", "2000", "200"},
		eval[[]string](t, ctx, `['#ref', '#reason-s', '#op-s'].map(s => document.querySelector(s).getAttribute('maxlength'))`))

	// The script refuses a reason of spaces: nothing is sent.
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys(`#ref`, "H42"), chromedp.SendKeys(`#reason-s`, "   "),
		chromedp.SendKeys(`#op-s`, "Maria"), chromedp.Click(`#decide-succeeded`)))
	require.NotEmpty(t, eval[string](t, ctx, `document.querySelector('#reason-s').validationMessage`))
	require.Equal(t, "/operations/form:1", eval[string](t, ctx, `location.pathname`))

	// A browser that sends it anyway (no script, no validation: submit()
	// skips both) gets the refusal in the form.
	resp, err := chromedp.RunResponse(ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector('#decide-succeeded').form.submit()`))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusBadRequest, resp.Status)
	require.EqualValues(t, 1, srv.posts.Load(), "only the submit() reached the console")
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(`#err-s`)))
	require.Equal(t, "Write a reason: what you checked and why this decision is right.", pageText(t, ctx, `form:has(#decide-succeeded) #err-s`))
	require.Equal(t, "reason-s", eval[string](t, ctx, `document.activeElement.id`), "the field to fix has the focus")
	require.Equal(t, []string{"true", "err-s"}, eval[[]string](t, ctx, `['aria-invalid', 'aria-describedby'].map(a => document.querySelector('#reason-s').getAttribute(a))`))
	require.Equal(t, []string{"H42", "   ", "Maria"}, eval[[]string](t, ctx, `['#ref', '#reason-s', '#op-s'].map(s => document.querySelector(s).value)`))
	require.Equal(t, "/operations/form:1", eval[string](t, ctx, `location.pathname`), "the operation's address, not the form's")
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(`#decide-succeeded`)))
	require.EqualValues(t, 1, srv.posts.Load(), "the reload posted nothing")
	require.False(t, eval[bool](t, ctx, `!!document.querySelector('p.error')`))

	// Fixed, it is recorded, under the name typed, marked as the console's.
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#ref`, "H42"), chromedp.SendKeys(`#reason-s`, "found H42"), chromedp.SendKeys(`#op-s`, "Maria"),
		chromedp.Click(`#decide-succeeded`), shown(`p.notice`)))
	require.EqualValues(t, 2, srv.posts.Load())
	require.Contains(t, pageText(t, ctx, `#timeline li:last-child`), "by "+consoleActor(t, l, token, "Maria"))
}

// TestDecisionWords: the console checks a decision's fields itself and
// says what is wrong in its own words, in the form of the decision, with
// what was typed; the actor recorded is the name typed, marked as taken
// in the console, and at most 200 bytes.
func TestDecisionWords(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "words:1"}, "timeout", "no lookup")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	csrf, seen := formOf(t, s.get("/operations/words:1"))
	post := func(form url.Values) (int, string) {
		form.Set("csrf", csrf)
		form.Set("seen", seen)
		return s.post("/operations/words:1/resolve", form)
	}
	errorOf := func(body, id string) string {
		m := regexp.MustCompile(`<p class="error" id="` + id + `"[^>]*>([^<]*)</p>`).FindStringSubmatch(body)
		require.Len(t, m, 2, "an error in form %s", id)
		return html.UnescapeString(m[1])
	}
	for _, tc := range []struct {
		form        url.Values
		id, field   string
		says, value string
	}{
		{url.Values{"decision": {"mark_succeeded"}, "reason": {"found it"}, "operator": {"Maria"}}, "err-s", "ref",
			"Write the reference you found at the destination", `value="Maria"`},
		{url.Values{"decision": {"mark_succeeded"}, "ref": {strings.Repeat("r", 201)}, "reason": {"found it"}}, "err-s", "ref",
			"The reference is 201 bytes long; the ledger keeps at most 200.", ">found it</textarea>"},
		{url.Values{"decision": {"cancel"}, "reason": {strings.Repeat("é", 1001)}}, "err-c", "reason-c",
			"The reason is 2002 bytes long; the ledger keeps at most 2000. Shorten it.", "éééé</textarea>"},
		{url.Values{"decision": {"authorize_retry"}, "reason": {"x\x00y"}}, "err-r", "reason-r",
			"The reason holds characters the ledger cannot store", ""},
		{url.Values{"decision": {"authorize_retry"}, "reason": {"checked"}, "operator": {strings.Repeat("n", 201)}}, "err-r", "op-r",
			"Your name is 201 bytes long; the ledger keeps at most 200.", ">checked</textarea>"},
	} {
		code, body := post(tc.form)
		require.Equal(t, http.StatusBadRequest, code, tc.says)
		msg := errorOf(body, tc.id)
		require.Contains(t, msg, tc.says)
		for _, word := range []string{"mark_succeeded", "destination_ref", "authorize_retry", "invalid input"} {
			require.NotContains(t, msg, word)
		}
		require.Regexp(t, `id="`+tc.field+`"[^>]* aria-invalid="true" aria-describedby="`+tc.id+`" autofocus`, body, tc.says)
		require.Contains(t, body, tc.value)
	}
	op, err := l.Get(context.Background(), "words:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State, "nothing recorded")

	// A name as long as the ledger takes is kept whole, and the console
	// and the token follow it.
	name := strings.Repeat("n", opledger.MaxOperatorBytes)
	code, _ := post(url.Values{"decision": {"authorize_retry"}, "reason": {"checked"}, "operator": {"  " + name + " "}})
	require.Equal(t, http.StatusSeeOther, code)
	timeline, err := l.Timeline(context.Background(), "words:1")
	require.NoError(t, err)
	actor := timeline[len(timeline)-1].Actor
	require.Equal(t, consoleActor(t, l, token, name), actor)

	heldOp(t, l, opledger.Intent{Key: "words:2"}, "timeout", "no lookup")
	csrf, seen = formOf(t, s.get("/operations/words:2"))
	// A name that tries to pass for the reconciler is the console's; no
	// name is "operator", the console's too.
	for _, tc := range []struct{ typed, actor string }{{"reconciler", consoleActor(t, l, token, "reconciler")}, {"  ", consoleActor(t, l, token, "operator")}} {
		code, _ := s.post("/operations/words:2/resolve", url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"authorize_retry"},
			"reason": {"checked"}, "operator": {tc.typed}})
		require.Equal(t, http.StatusSeeOther, code)
		timeline, err = l.Timeline(context.Background(), "words:2")
		require.NoError(t, err)
		require.Equal(t, tc.actor, timeline[len(timeline)-1].Actor)
		_, _, err = l.Resolve(context.Background(), "words:2", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "again"})
		require.NoError(t, err)
		csrf, seen = formOf(t, s.get("/operations/words:2"))
	}
}

// TestPhoneLayout: at 390 px nothing is wider than the screen: the
// queue, an operation with long unbroken values, one with short values,
// and the dashboard.
func TestPhoneLayout(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	long := strings.Repeat("x", 1500)
	heldOp(t, b.ledger, opledger.Intent{Key: "long:1", Owner: strings.Repeat("o", 150), Destination: strings.Repeat("d", 150)},
		"E"+long, "no lookup at "+long)
	// Uncertain, and no reconciler here: its advice names the destination.
	uncertainOp(t, b.ledger, "long:2", strings.Repeat("d", 150))
	ctx := browser(t)
	browserSignIn(t, ctx, b.url, b.token)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)))
	for _, path := range []string{"/", "/operations/long:1", "/operations/long:2", "/operations/intake:I17:create", "/operations/order:16:prepare", "/dashboard", "/operations"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+path), chromedp.WaitVisible(`h1`)))
		width := eval[int](t, ctx, `document.documentElement.scrollWidth`)
		require.LessOrEqual(t, width, 391, "%s is %d px wide on a 390 px screen", path, width)
		if path == "/" || path == "/operations" {
			// The header row is hidden: each value says what it is.
			label := eval[string](t, ctx, `getComputedStyle(document.querySelector('table.queue td[data-label="Owner"]'), '::before').content`)
			require.Equal(t, `"Owner: "`, label, path)
		}
	}
}

// TestDesktopKeysWhole: on a desktop screen the queue's keys, owners and
// destinations are not broken inside a word when the table has room.
func TestDesktopKeysWhole(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	heldOp(t, b.ledger, opledger.Intent{Key: "DEMO-MAIL-017", Owner: "ops-team"}, "timeout", "no lookup")
	ctx := browser(t)
	browserSignIn(t, ctx, b.url, b.token)
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(`table.queue`)))
	// An inline element broken over lines has a box on each.
	broken := eval[[]string](t, ctx, `[...document.querySelectorAll('table.queue tbody th a, table.queue tbody td[data-label="Owner"] bdi, table.queue tbody td[data-label="Destination"] bdi')]
		.filter(e => e.getClientRects().length > 1).map(e => e.textContent)`)
	require.Empty(t, broken, "cells broken over lines")
	require.Contains(t, eval[string](t, ctx, `document.querySelector('table.queue').textContent`), "DEMO-MAIL-017")
}

// TestWhyAtTheTop: an operation that needs attention says, at the top of
// its page, what put it in its state (the timeline's entry, which is also
// at the bottom); a settled one says nothing of the kind.
func TestWhyAtTheTop(t *testing.T) {
	t.Parallel()
	b := start(t)
	heldOp(t, b.ledger, opledger.Intent{Key: "why:1", Owner: "ops"}, "timeout", "the mailer declares no lookup")
	s := signIn(t, b.url, b.token)
	page := s.get("/operations/why:1")
	require.Regexp(t, `<dt>Why held</dt><dd id="why"><strong>cannot be decided automatically</strong>: <bdi>[^<]*the mailer declares no lookup</bdi>`+
		` <span class="actor">\(by <bdi>reconciler</bdi>, <time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>\)</span></dd>`, page)
	require.Less(t, strings.Index(page, `id="why"`), strings.Index(page, "<h2>Payload</h2>"), "above the payload and the forms")
	require.Contains(t, page, `<p id="guidance">Look at the destination first: if the effect is there, mark it succeeded`)

	_, _, err := b.ledger.Resolve(context.Background(), "why:1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded,
		DestinationRef: "M1", Reason: "found it"})
	require.NoError(t, err)
	require.NotContains(t, s.get("/operations/why:1"), `id="why"`, "settled: nothing to explain")
}

// TestDashboardEvents: the dashboard counts the events received and the
// duplicate deliveries beside the other figures.
func TestDashboardEvents(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	page := signIn(t, b.url, b.token).get("/dashboard")
	require.Contains(t, page, `<span class="n">1</span><span class="l">events received (1 kept)</span>`)
	require.Contains(t, page, `<span class="n">1</span><span class="l">duplicate deliveries (of 2)</span>`)
}

// TestSessionCookieOverTLS: over TLS the session cookie is Secure and
// named with the __Host- prefix, which browsers refuse from plain-HTTP
// pages and other subdomains; the plain-HTTP name is not read there, and
// a request carrying two session cookies (one set by a page sharing the
// host) is signed out rather than guessed at.
func TestSessionCookieOverTLS(t *testing.T) {
	t.Parallel()
	_, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewTLSServer(c)
	defer srv.Close()
	hc := srv.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := hc.PostForm(srv.URL+"/login", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		require.NotEqual(t, console.CookieName, ck.Name, "not the plain-HTTP name")
		if ck.Name == console.SecureCookieName {
			session = ck
		}
	}
	require.NotNil(t, session)
	require.True(t, session.Secure)
	require.True(t, session.HttpOnly)
	require.Equal(t, "/", session.Path)

	get := func(cookies ...*http.Cookie) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		require.NoError(t, err)
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	mine := &http.Cookie{Name: console.SecureCookieName, Value: session.Value}
	require.Equal(t, http.StatusOK, get(mine))
	require.Equal(t, http.StatusSeeOther, get(&http.Cookie{Name: console.SecureCookieName, Value: "opls_someone-elses"}, mine),
		"two session cookies: signed out")
	require.Equal(t, http.StatusSeeOther, get(&http.Cookie{Name: console.CookieName, Value: session.Value}),
		"the plain-HTTP name is not read over TLS")
}
