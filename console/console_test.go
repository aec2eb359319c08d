package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

type bundle struct {
	url    string
	token  string
	ledger *opledger.Ledger
}

func start(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Tenant: "acme", Worker: "worker-7"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return &bundle{url: srv.URL(), token: token, ledger: l}
}

// seed makes one operation in each unresolved state, one awaiting
// approval, plus a succeeded one.
func (b *bundle) seed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	mk := func(key, dest string, payload string) *opledger.Claim {
		c, err := b.ledger.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "crm.create_inquiry",
			Destination: dest, Owner: "intake-team", Payload: json.RawMessage(payload), SensitiveFields: []string{"contact.email"}}})
		require.NoError(t, err)
		_, err = b.ledger.Dispatch(ctx, key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		return c
	}
	c := mk("intake:I17:create", "crm", `{"submission":"847","contact":{"email":"ana@example.invalid"}}`)
	_, err := b.ledger.Report(ctx, "intake:I17:create", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "read: connection reset after the request was written"})
	require.NoError(t, err)
	_, _, err = b.ledger.Reconcile(ctx, "intake:I17:create", opledger.Finding{Evidence: "the CRM offers no lookup"})
	require.NoError(t, err)
	c = mk("mail:welcome:u17", "mailer", `{"template":"welcome"}`)
	_, err = b.ledger.Report(ctx, "mail:welcome:u17", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after 10 s"})
	require.NoError(t, err)
	c = mk("order:17:prepare", "erp", `{"units":2}`)
	_, err = b.ledger.Report(ctx, "order:17:prepare", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422 units must be positive"})
	require.NoError(t, err)
	_, _, err = b.ledger.Record(ctx, opledger.Intent{Key: "refund:17:issue", Action: "payments.refund", Destination: "payments",
		Owner: "finance", Payload: json.RawMessage(`{"cents":4900}`), RequiresApproval: true})
	require.NoError(t, err)
	for _, d := range []string{"d1", "d2"} {
		_, err = b.ledger.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: "evt-847", DeliveryID: d, Type: "submission.accepted", Payload: json.RawMessage(`{"submission_id":"847"}`)})
		require.NoError(t, err)
	}
	_, _, err = b.ledger.PutWorkflow(ctx, "wf-17", opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "task", Action: "crm.create_task", Destination: "crm", Payload: json.RawMessage(`{"t":1}`)},
		{Name: "email", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"task":"{steps.task.ref}"}`)}}})
	require.NoError(t, err)
	c = mk("order:16:prepare", "erp", `{"units":1}`)
	_, err = b.ledger.Report(ctx, "order:16:prepare", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "ERP-16"})
	require.NoError(t, err)
	// The server announces itself, as serve's maintenance does.
	_, err = b.ledger.Announce(ctx, opledger.AnnounceOptions{})
	require.NoError(t, err)
}

// shiftedConsole opens a ledger of tenant acme with opts, whose clock runs
// *offset ahead of the store's, a token of it and a console over it; the
// ledger is closed when the test ends.
func shiftedConsole(t *testing.T, opts opledger.Options) (*opledger.Ledger, string, *console.Console, *atomic.Int64) {
	t.Helper()
	offset := new(atomic.Int64)
	opts.Tenant = "acme"
	opts.Clock = func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(context.Background(), "console", opledger.ReadWrite)
	require.NoError(t, err)
	c, err := console.New(l, console.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return l, token, c, offset
}

// consoleActor is the actor that a decision taken in a console session
// signed in with token records for name: the name, then the console and
// the token.
func consoleActor(t *testing.T, l *opledger.Ledger, token, name string) string {
	t.Helper()
	tok, err := l.Authenticate(context.Background(), token)
	require.NoError(t, err)
	return name + " (console, " + tok.Credential() + ")"
}

// consoleSession is a console signed in over plain HTTP: its client keeps
// the session cookie and does not follow redirects.
type consoleSession struct {
	t    *testing.T
	hc   *http.Client
	base string
}

// signIn signs in to the console at base with token.
func signIn(t *testing.T, base, token string) *consoleSession {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.PostForm(base+"/login", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed in")
	return &consoleSession{t: t, hc: hc, base: base}
}

// get returns the page at path, which must answer 200.
func (s *consoleSession) get(path string) string {
	s.t.Helper()
	status, body := s.fetch(path)
	require.Equal(s.t, http.StatusOK, status, path)
	return body
}

// post posts form to path and returns the status and the body.
func (s *consoleSession) post(path string, form url.Values) (int, string) {
	s.t.Helper()
	resp, err := s.hc.PostForm(s.base+path, form)
	require.NoError(s.t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(s.t, err)
	return resp.StatusCode, string(body)
}

// browser starts headless Chromium with the flags this machine needs.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but chromium is not installed (apt-get install -y chromium)")
		}
		t.Skip("BROWSER TESTS SKIPPED: chromium is not installed (apt-get install -y chromium)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// shown waits until sel, an element of the page a click or a submit
// leads to, is visible, and then until that page has loaded. A page's
// nodes found while it is still being parsed do not outlive the parse:
// once it ends (DOMContentLoaded, after the deferred console.js, slow to
// come on a loaded machine) the browser numbers the document's nodes
// again, and a node found before then is unknown when it is clicked or
// read ("Could not find node with given id").
func shown(sel string) chromedp.Action[chromedp.Void] {
	loaded := chromedp.Poll[chromedp.Void](`document.readyState === "complete"`, chromedp.WithPollingTimeout(0))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		if _, err := chromedp.WaitVisible(sel)(ctx, t); err != nil {
			return chromedp.Void{}, err
		}
		return loaded(ctx, t)
	}
}

// screenshot saves a PNG of the page: into docs/img when
// OPLEDGER_SCREENSHOTS=1, else into the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := t.TempDir()
	if os.Getenv("OPLEDGER_SCREENSHOTS") == "1" {
		dir = "../docs/img"
	}
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), buf, 0o644))
}

// TestConsole signs in, opens a held operation, resolves it with a reason,
// and sees it leave the queue and its timeline grow.
func TestConsole(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	ctx := browser(t)

	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		require.NoError(t, err)
		return v
	}

	do(chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(`#token`))
	screenshot(t, ctx, "login")

	// A wrong token is refused.
	do(chromedp.SendKeys(`#token`, "opl_wrong"), chromedp.Submit(`#token`), shown(`p.error`))
	require.Contains(t, text(`p.error`), "unknown or revoked")

	do(chromedp.SetValue(`#token`, b.token), chromedp.Submit(`#token`), shown(`table.queue`))
	body := text(`table.queue`)
	require.Contains(t, body, "intake:I17:create")
	require.Contains(t, body, "mail:welcome:u17")
	require.Contains(t, body, "order:17:prepare")
	require.Contains(t, body, "refund:17:issue", "waits for an approver")
	require.NotContains(t, body, "order:16:prepare", "succeeded operations are not exceptions")
	require.Equal(t, "intake:I17:create", strings.TrimSpace(text(`table.queue tbody tr:first-child th`)), "held, with a review time, comes first")
	requireAccessible(t, ctx)
	screenshot(t, ctx, "queue")

	// Open the held operation.
	do(chromedp.Click(`a[href="/operations/intake:I17:create"]`), shown(`#timeline`))
	payload := text(`pre.payload`)
	require.Contains(t, payload, `"***"`)
	require.NotContains(t, payload, "ana@example.invalid", "sensitive fields masked")
	timelineBefore := text(`#timeline`)
	require.Contains(t, timelineBefore, "cannot be decided automatically")
	requireAccessible(t, ctx)
	screenshot(t, ctx, "operation")

	// Decide, with a reason; the confirmation dialog is answered yes.
	do(chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#ref`, "H42"),
		chromedp.SendKeys(`#reason-s`, "Found inquiry H42 in the CRM, matching submission 847"),
		chromedp.SendKeys(`#op-s`, "Maria"),
		chromedp.Click(`#decide-succeeded`),
		shown(`p.notice`))
	require.Contains(t, text(`p.notice`), "Recorded: succeeded")
	timelineAfter := text(`#timeline`)
	require.Contains(t, timelineAfter, "operator marked succeeded")
	require.Contains(t, timelineAfter, "by Maria")
	require.Greater(t, len(timelineAfter), len(timelineBefore), "the timeline grew")

	// Back to the queue: it is gone.
	do(chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(`table.queue`))
	body = text(`table.queue`)
	require.NotContains(t, body, "intake:I17:create")
	require.Contains(t, body, "mail:welcome:u17")

	// The dashboard shows the counters.
	do(chromedp.Navigate(b.url+"/dashboard"), chromedp.WaitVisible(`div.counters`))
	require.Regexp(t, `2\s+confirmed effects`, text(`div.counters`))
	require.Contains(t, text(`#processes-list`), "(this server)")
	requireAccessible(t, ctx)
	screenshot(t, ctx, "dashboard")

	// Each count of the state table opens the list of its operations.
	do(chromedp.Click(`table.states a[href="/operations?state=succeeded"]`), shown(`#operations`))
	list := text(`#operations`)
	require.Contains(t, list, "intake:I17:create")
	require.Contains(t, list, "order:16:prepare")
	require.NotContains(t, list, "mail:welcome:u17", "uncertain, not succeeded")
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#f-state').value`))
	require.NoError(t, err)
	require.Equal(t, "succeeded", state, "the filter shows the state listed")
	requireAccessible(t, ctx)

	// Events with their deliveries; workflows with their steps.
	do(chromedp.Navigate(b.url+"/events"), chromedp.WaitVisible(`table.queue`))
	require.Contains(t, text(`main`), "2 deliveries, 1 of them duplicates")
	do(chromedp.Click(`a[href="/events/forms/evt-847"]`), shown(`h2`))
	require.Contains(t, text(`main`), "duplicate")
	requireAccessible(t, ctx)
	do(chromedp.Navigate(b.url+"/workflows"), chromedp.WaitVisible(`#workflows`))
	require.Contains(t, text(`#workflows`), "wf-17", "the workflows page lists the open ones")
	requireAccessible(t, ctx)
	do(chromedp.SendKeys(`#wfkey`, "wf-17"),
		chromedp.Submit(`#wfkey`), shown(`ol.steps`))
	steps := text(`ol.steps`)
	require.Contains(t, steps, "task")
	require.Contains(t, steps, "waits for task")
	requireAccessible(t, ctx)
	screenshot(t, ctx, "workflow")

	// Readable on a phone: nothing wider than the screen.
	do(chromedp.EmulateViewport(390, 844), chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(`table.queue`))
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	require.NoError(t, err)
	require.False(t, overflow, "the queue fits a phone screen")
	screenshot(t, ctx, "queue-phone")

	op, err := b.ledger.Get(context.Background(), "intake:I17:create")
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "H42", op.DestinationRef)
}

// requireAccessible checks that every visible form field has a label and
// the page has one h1.
func requireAccessible(t *testing.T, ctx context.Context) {
	t.Helper()
	unlabeled, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('input:not([type=hidden]), textarea, select')].filter(e => e.labels.length === 0).map(e => e.name)`))
	require.NoError(t, err)
	h1s, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('h1').length`))
	require.NoError(t, err)
	require.Empty(t, unlabeled, "fields without a label")
	require.Equal(t, 1, h1s)
}

// TestCSRF: a POST without the form's CSRF token is refused and records
// nothing, even with a valid session cookie; without a session the console
// sends the browser to sign in.
func TestCSRF(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	resp, err := hc.Get(b.url + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?next=%2F", resp.Header.Get("Location"))

	// Paths that a browser, or http.Redirect's cleaning, would turn into
	// another site.
	for _, next := range []string{"//evil.example/", "/x/../\\evil.example", "/\t/evil.example", "/\\evil.example", "https://evil.example/", "/a\nb"} {
		resp, err = hc.PostForm(b.url+"/login", url.Values{"token": {b.token}, "next": {next}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/", resp.Header.Get("Location"), "no open redirect for %q", next)
	}
	// A sign-in posted from another site (login CSRF) is refused.
	req, err := http.NewRequest(http.MethodPost, b.url+"/login", strings.NewReader(url.Values{"token": {b.token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err = hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Empty(t, resp.Cookies(), "no session")

	resp, err = hc.PostForm(b.url+"/login", url.Values{"token": {b.token}, "next": {"/operations/intake:I17:create?x=1"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "/operations/intake:I17:create?x=1", resp.Header.Get("Location"), "a path of this site is kept")
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			session = c
		}
	}
	require.NotNil(t, session)
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)

	form := url.Values{"decision": {"cancel"}, "reason": {"forged"}}
	for _, csrf := range []string{"", "0000"} {
		if csrf != "" {
			form.Set("csrf", csrf)
		}
		resp, err = hc.PostForm(b.url+"/operations/intake:I17:create/resolve", form)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Contains(t, string(body), "did not come from the console")
	}
	op, err := b.ledger.Get(context.Background(), "intake:I17:create")
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State, "nothing was recorded")

	// Without a session a POST is refused outright.
	resp, err = http.PostForm(b.url+"/operations/intake:I17:create/resolve", form)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.False(t, errors.Is(err, http.ErrUseLastResponse))
}

// TestSessions: signing in keeps a session secret in the cookie, never
// the API token; signing out ends the session on the server, so a copy of
// the cookie stops working too; revoking the token ends its sessions.
func TestSessions(t *testing.T) {
	t.Parallel()
	b := start(t)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	signIn := func(t *testing.T) *http.Cookie {
		t.Helper()
		hc := &http.Client{CheckRedirect: noRedirect}
		resp, err := hc.PostForm(b.url+"/login", url.Values{"token": {b.token}, "next": {"/"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		for _, c := range resp.Cookies() {
			if c.Name == console.CookieName {
				return c
			}
		}
		t.Fatal("no session cookie")
		return nil
	}
	// get fetches path with the cookie and returns the status and body.
	get := func(t *testing.T, ck *http.Cookie, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, b.url+path, nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
		resp, err := (&http.Client{CheckRedirect: noRedirect}).Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	ck := signIn(t)
	require.Regexp(t, `^opls_`, ck.Value)
	require.NotContains(t, ck.Value, b.token, "the cookie never holds the API token")
	require.Equal(t, int(console.SessionDuration/time.Second), ck.MaxAge)
	status, body := get(t, ck, "/")
	require.Equal(t, http.StatusOK, status)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "the page carries its CSRF token")

	req, err := http.NewRequest(http.MethodPost, b.url+"/logout", strings.NewReader(url.Values{"csrf": {m[1]}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	resp, err := (&http.Client{CheckRedirect: noRedirect}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login", resp.Header.Get("Location"))
	status, _ = get(t, ck, "/")
	require.Equal(t, http.StatusSeeOther, status, "a copy of the cookie kept after signing out no longer works")

	ck = signIn(t)
	status, _ = get(t, ck, "/dashboard")
	require.Equal(t, http.StatusOK, status)
	toks, err := b.ledger.Tokens(context.Background(), false)
	require.NoError(t, err)
	require.NoError(t, b.ledger.RevokeToken(context.Background(), toks[0].ID))
	status, _ = get(t, ck, "/dashboard")
	require.Equal(t, http.StatusSeeOther, status, "revoking the token ends the session")
}

// TestQueueShowsEveryState: the queue reads each state on its own, so a
// burst of newer failures never hides an older held or uncertain
// operation; the caption says which states have more than shown.
func TestQueueShowsEveryState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	c.SetQueueLimit(2)
	srv := httptest.NewServer(c)
	defer srv.Close()

	// dispatched claims a new operation and marks its dispatch.
	dispatched := func(key string) *opledger.Claim {
		t.Helper()
		cl, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}})
		require.NoError(t, err)
		_, err = l.Dispatch(ctx, key, cl.AttemptID, cl.FencingToken)
		require.NoError(t, err)
		return cl
	}
	report := func(key string, cl *opledger.Claim, r opledger.Report) {
		t.Helper()
		_, err := l.Report(ctx, key, cl.AttemptID, cl.FencingToken, r)
		require.NoError(t, err)
	}
	held := func(key string) {
		t.Helper()
		report(key, dispatched(key), opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		_, _, err := l.Reconcile(ctx, key, opledger.Finding{Evidence: "no lookup"})
		require.NoError(t, err)
	}
	// The oldest: one held, one uncertain; an hour later two more held,
	// then four failures. Newest first, the two later holds would hide
	// the first, whose review is due first.
	held("old:held")
	report("old:uncertain", dispatched("old:uncertain"), opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	lost := dispatched("old:dup")
	offset.Add(int64(time.Hour))
	// old:dup's worker lost its lease; an operator authorized a retry,
	// which succeeded, and then the first call's success came in: the
	// destination acted twice.
	_, err := l.ExpireLeases(ctx)
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "old:dup", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "not in the CRM"})
	require.NoError(t, err)
	retry, err := l.Claim(ctx, "old:dup", opledger.ClaimOptions{})
	require.NoError(t, err)
	report("old:dup", retry, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "CRM-2"})
	_, err = l.Report(ctx, "old:dup", lost.AttemptID, lost.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "CRM-1"})
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	held("new:held:0")
	held("new:held:1")
	for i := range 4 {
		key := fmt.Sprintf("new:failed:%d", i)
		report(key, dispatched(key), opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422"})
	}
	// The newest failures of all were cancelled by an operator: they need
	// no repair, and are neither shown nor counted.
	for i := range 3 {
		key := fmt.Sprintf("new:cancelled:%d", i)
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "order withdrawn"})
		require.NoError(t, err)
	}
	// old:held's review time (24 h after it was held) has passed; the
	// others' has not.
	offset.Add(int64(23*time.Hour + 30*time.Minute))

	get := signIn(t, srv.URL, token).get
	page := get("/")
	for _, key := range []string{"old:held", "new:held:0", "old:uncertain", "new:failed:3", "new:failed:2"} {
		require.Contains(t, page, key)
	}
	require.NotContains(t, page, "new:held:1", "only the two held operations due first")
	for _, key := range []string{"new:failed:1", "new:failed:0"} {
		require.NotContains(t, page, key, "only the newest two failures")
	}
	require.NotContains(t, page, "new:cancelled", "a cancelled operation needs no repair")
	require.Contains(t, get("/operations?state=failed"), "new:cancelled:2", "the list of every failed operation has it")
	// The caption counts every operation that needs attention, not only
	// those shown, and says which states have more.
	require.Contains(t, page, "Showing 5 of 8 operations that need attention: at most 2 of each state are shown (the held ones due first, the others the newest), and there are 3 held and 4 failed.")
	for _, st := range []string{"held", "uncertain"} {
		require.Contains(t, page, `<a href="/operations?state=`+st+`">all `+st+`</a>`, "the caption links to every %s operation", st)
	}
	require.Contains(t, page, `<a href="/operations?state=failed&amp;except_cancelled=true">all failed</a>`, "the caption links to every failed operation it counts")
	require.Less(t, strings.Index(page, "old:held"), strings.Index(page, "new:held:0"), "earliest review first")
	require.Less(t, strings.Index(page, "new:held:0"), strings.Index(page, "old:uncertain"), "held first")
	require.Equal(t, 1, strings.Count(page, `<span class="badge overdue">overdue</span>`), "old:held only")
	require.Regexp(t, `old:held</a></th>(?s:.)*?overdue(?s:.)*?new:held:0`, page, "the badge is on old:held's row")

	// An attempt still running is in the total, and the label says so
	// (/metrics counts it apart, in opledger_attempts_open).
	dispatched("run:1")
	dashboard := get("/dashboard")
	require.Regexp(t, `<span class="l">technical attempts \(1 still running\)</span>`, dashboard)
	require.Regexp(t, `<span class="n">1</span><span class="l">held past their review time</span>`, dashboard)
	// The dashboard lists the operations with duplicate effects.
	require.Regexp(t, `<span class="n">1</span><span class="l">duplicate effects detected</span>`, dashboard)
	require.Contains(t, dashboard, `<a href="/operations/old:dup">old:dup</a>`)
	require.NotContains(t, page, "old:dup", "succeeded: not in the exception queue")
}

// TestConsoleLab plays the lost-response scenario on the lab page and
// checks the three counters, the state and the explanations after each
// step, then Reset (which asks first) and Replay.
func TestConsoleLab(t *testing.T) {
	t.Parallel()
	b := start(t)
	ctx := browser(t)
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, steps...))
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		require.NoError(t, err)
		return strings.TrimSpace(v)
	}
	counters := func() [4]string {
		t.Helper()
		return [4]string{text(`#lost-response-attempts`), text(`#lost-response-actions`), text(`#lost-response-verifications`), text(`#lost-response-state`)}
	}

	do(chromedp.Navigate(b.url+"/login"), chromedp.WaitVisible(`#token`),
		chromedp.SetValue(`#token`, b.token), chromedp.Submit(`#token`), shown(`table.queue, p.empty`))
	do(chromedp.Click(`nav a[href="/lab"]`), shown(`#lost-response`))
	require.Equal(t, [4]string{"0", "0", "0", "not recorded yet"}, counters())
	require.Contains(t, text(`main`), "every send, repeat and retry counts", "the page says what an attempt is")
	requireAccessible(t, ctx)

	for i, tc := range []struct {
		button string
		want   [4]string
		says   string
	}{
		{"send", [4]string{"1", "1", "0", "uncertain"}, "never confirmed"},
		{"retry", [4]string{"2", "1", "0", "uncertain"}, "Held back"},
		{"verify", [4]string{"2", "1", "1", "succeeded"}, "found record"},
		{"retry", [4]string{"3", "1", "1", "succeeded"}, "Answered from the ledger"},
	} {
		n := strconv.Itoa(i + 1)
		do(chromedp.Click(`#lost-response-`+tc.button), shown(`#lost-response-steps li:nth-child(`+n+`)`))
		require.Equal(t, tc.want, counters(), "after step %s (%s)", n, tc.button)
		require.Contains(t, text(`#lost-response-steps li:nth-child(`+n+`)`), tc.says)
	}
	// The other scenarios are untouched.
	require.Equal(t, "0", text(`#normal-attempts`))
	screenshot(t, ctx, "lab")

	// The lab plays on a scratch ledger of its own: the served store,
	// every tenant of it, holds none of its attempts or effects.
	stats, err := b.ledger.Stats(context.Background(), true)
	require.NoError(t, err)
	require.Zero(t, stats.AttemptsTotal, "lab attempts in the served store")
	require.Zero(t, stats.ConfirmedEffects, "lab effects in the served store")
	for state, n := range stats.OperationsByState {
		require.Zero(t, n, "lab operations %s in the served store", state)
	}

	// Reset asks first, without a script: "Keep it" keeps the run, and
	// only "Reset the scenario" resets it.
	do(chromedp.Click(`#lost-response-reset`), shown(`#reset-confirm`))
	require.Contains(t, text(`#reset-loses`), "discards the 4 steps")
	requireAccessible(t, ctx)
	do(chromedp.Click(`#reset-keep`), shown(`#lost-response-steps li:nth-child(4)`))
	require.Equal(t, [4]string{"3", "1", "1", "succeeded"}, counters(), "kept")
	do(chromedp.Click(`#lost-response-reset`), shown(`#reset-confirm`),
		chromedp.Click(`#reset-confirm`), shown(`#lost-response p.empty`))
	require.Equal(t, [4]string{"0", "0", "0", "not recorded yet"}, counters())
	do(chromedp.Click(`#lost-response-replay`), shown(`#lost-response-steps li:nth-child(4)`))
	require.Equal(t, [4]string{"3", "1", "1", "succeeded"}, counters())
}

// TestLabScratchLedger: the lab opens its scratch ledger on first use,
// in a directory of its own, and Close removes it; after Close the lab
// answers 503 and the served ledger is still open.
func TestLabScratchLedger(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	require.Empty(t, c.LabDir(), "nothing opened before the lab is used")
	page := s.get("/lab")
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	require.Len(t, csrf, 2)
	status, _ := s.post("/lab/normal", url.Values{"step": {"send"}, "csrf": {csrf[1]}})
	require.Equal(t, http.StatusSeeOther, status)
	dir := c.LabDir()
	require.NotEmpty(t, dir)
	require.FileExists(t, filepath.Join(dir, "lab.db"))

	require.NoError(t, c.Close())
	require.NoDirExists(t, dir)
	status, _ = s.post("/lab/normal", url.Values{"step": {"send"}, "csrf": {csrf[1]}})
	require.Equal(t, http.StatusServiceUnavailable, status)
	_, err := l.Stats(context.Background(), true)
	require.NoError(t, err, "the served ledger stays open")
	require.NoError(t, c.Close(), "a second Close is harmless")
}

// TestLabCSRF: the lab's buttons are POST forms like the others: without
// the CSRF token nothing is played.
func TestLabCSRF(t *testing.T) {
	t.Parallel()
	b := start(t)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm(b.url+"/login", url.Values{"token": {b.token}, "next": {"/lab"}})
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `id="lost-response-attempts">0<`)

	resp, err = hc.PostForm(b.url+"/lab/lost-response", url.Values{"step": {"send"}, "csrf": {"0000"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp, err = hc.Get(b.url + "/lab")
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(page), `id="lost-response-attempts">0<`, "nothing was played")
	require.Contains(t, string(page), `id="lost-response-actions">0<`)

	// With the page's token the step is played.
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(string(page))
	require.Len(t, csrf, 2)
	resp, err = hc.PostForm(b.url+"/lab/lost-response", url.Values{"step": {"send"}, "csrf": {csrf[1]}})
	require.NoError(t, err)
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), `id="lost-response-actions">1<`)

	for path, step := range map[string]string{"/lab/nope": "send", "/lab/lost-response": "jump"} {
		resp, err = hc.PostForm(b.url+path, url.Values{"step": {step}, "csrf": {csrf[1]}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Contains(t, []int{http.StatusNotFound, http.StatusBadRequest}, resp.StatusCode, path)
	}
}

// TestDecisionEdges: a compacted operation offers no decision and a
// decision posted for it says why it does not apply; a key that cannot be
// one is not found (not a store failure); and the next page of a filtered
// event list keeps the filter.
func TestDecisionEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Retention: time.Hour})
	srv := httptest.NewServer(c)
	defer srv.Close()

	for _, key := range []string{"gone:1", "live:1"} {
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	_, _, err := l.Resolve(ctx, "gone:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
	require.NoError(t, err)
	done, err := l.Claim(ctx, "done:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "done:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Report(ctx, "done:1", done.AttemptID, done.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.NoError(t, err)
	offset.Add(int64(2 * time.Hour))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Tombstoned)
	// One page of events (opledger.MaxListLimit) and one more, of source
	// s1, newer than three of source s2.
	for i := range opledger.MaxListLimit + 4 {
		source := "s1"
		if i < 3 {
			source = "s2"
		}
		_, err = l.ReceiveEvent(ctx, nil, opledger.Event{Source: source, EventID: fmt.Sprintf("e%d", i), Type: "t", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}

	session := signIn(t, srv.URL, token)
	get, post := session.get, session.post

	page := get("/operations/gone:1")
	require.NotContains(t, page, `id="decide-succeeded"`, "a tombstone offers no decision")
	require.NotContains(t, page, "Authorize retry")
	require.Contains(t, page, "Compacted on retention")
	// What was removed is said, not shown as none.
	require.Contains(t, page, "<dt>Attempts</dt><dd>removed on compaction</dd>")
	require.Contains(t, get("/operations/done:1"), "<dt>Attempts</dt><dd>1, removed on compaction</dd>", "the tombstone keeps the count")
	require.NotContains(t, page, "No attempt yet")
	require.Regexp(t, `<h2>Timeline</h2>\s*<p>Removed on compaction.</p>`, page)
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	require.Len(t, csrf, 2)
	gone, err := l.Get(ctx, "gone:1")
	require.NoError(t, err)
	code, body := post("/operations/gone:1/resolve", url.Values{"csrf": {csrf[1]}, "decision": {"mark_succeeded"}, "ref": {"R1"}, "reason": {"seen"},
		"seen": {gone.UpdatedAt.Format(time.RFC3339Nano)}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "The operation was compacted")
	require.Contains(t, get("/operations/live:1"), "Cancel", "a live pending operation still can be cancelled")

	code, body = post("/operations/a@b/resolve", url.Values{"csrf": {csrf[1]}, "decision": {"cancel"}, "reason": {"x"}})
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "No operation has that key.")
	require.NotContains(t, body, "a@b", "a key refused for its syntax is not echoed")
	resp, err := session.hc.Get(srv.URL + "/operations/nope:1")
	require.NoError(t, err)
	missing, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, string(missing), "No operation of tenant acme has the key nope:1.")
	require.Contains(t, string(missing), `<nav aria-label="Main">`, "signed in: the page keeps the navigation")

	// A form refused for a field, posted from a page older than another
	// decision, is refused as stale: the page drawn again must not carry
	// the new version while the operator has not seen what changed.
	page = get("/operations/live:1")
	seen := regexp.MustCompile(`name="seen" value="([^"]+)"`).FindStringSubmatch(page)
	require.Len(t, seen, 2)
	live, err := l.Get(ctx, "live:1")
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "live:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "customer withdrew", Operator: "B",
		SeenUpdatedAt: live.UpdatedAt})
	require.NoError(t, err)
	code, body = post("/operations/live:1/resolve", url.Values{"csrf": {csrf[1]}, "seen": {seen[1]}, "decision": {"authorize_retry"},
		"reason": {strings.Repeat("é", 1500)}, "operator": {"A"}})
	require.Equal(t, http.StatusConflict, code, "stale before the field's own refusal")
	require.Contains(t, body, "Another decision was recorded since you opened this page")
	require.NotContains(t, body, "The reason is 3000 bytes long")
	op, err := l.Get(ctx, "live:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateFailed, op.State, "B's decision stands")

	page = get("/events?source=s1")
	next := regexp.MustCompile(`href="(/events\?[^"]*cursor=[^"]+)"`).FindStringSubmatch(page)
	require.Len(t, next, 2, "a next page")
	page = get(strings.ReplaceAll(next[1], "&amp;", "&"))
	require.Contains(t, page, "s1/e3")
	require.NotContains(t, page, "s2/e", "the next page keeps the source filter")
}
