package console_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// stuckWorkflow puts the workflow key whose step a succeeded and whose
// step b cannot be recorded (it reads a response member a did not give).
func stuckWorkflow(t *testing.T, l *opledger.Ledger, key string) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	claim, err := l.Claim(ctx, key+"/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, key+"/a", claim.AttemptID, claim.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
	stuck, err := l.StuckWorkflows(ctx, 10)
	require.NoError(t, err)
	require.NotEmpty(t, stuck)
}

// failedWorkflow puts the workflow key whose only step an operator
// cancelled (its operation failed).
func failedWorkflow(t *testing.T, l *opledger.Ledger, key string) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, key+"/create", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong customer", Operator: "bob"})
	require.NoError(t, err)
}

// workflowFormOf returns the CSRF token and the seen field of a workflow
// page's cancel form.
func workflowFormOf(t *testing.T, page string) url.Values {
	t.Helper()
	require.Contains(t, page, `id="cancel-workflow"`, "the page offers the cancellation")
	csrf, seen := formOf(t, page)
	return url.Values{"csrf": {csrf}, "seen": {seen}}
}

// TestCancelWorkflowInBrowser: the page of a stuck workflow, and of one
// whose step failed, offers a cancel form; cancelled there with a reason
// and a name, the workflow ends cancelled, by the name typed with the
// console and the token, and the page says so (Post/Redirect/Get). A
// second tab that had the failed workflow's page open before it changed
// is refused (409), shown the workflow as it is now with what was typed
// in the form, at the workflow's own address. A running workflow's page
// offers no form.
func TestCancelWorkflowInBrowser(t *testing.T) {
	t.Parallel()
	l, token, c, offset := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	srv := httptest.NewServer(c)
	defer srv.Close()
	a := browser(t)
	browserSignIn(t, a, srv.URL, token)
	stuckWorkflow(t, l, "wf:stuck")
	failedWorkflow(t, l, "wf:failed")
	_, _, err := l.PutWorkflow(ctx, "wf:running", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	b, cancel := chromedp.NewContext(a) // a second tab of the same browser
	defer cancel()

	require.NoError(t, chromedp.Do(a, chromedp.Navigate(srv.URL+"/workflows/wf:running"), chromedp.WaitVisible(`h1`)))
	require.False(t, eval[bool](t, a, `!!document.querySelector('#cancel-workflow')`), "a running workflow offers no cancellation")

	require.NoError(t, chromedp.Do(a, chromedp.Navigate(srv.URL+"/workflows/wf:stuck"), chromedp.WaitVisible(`#cancel-workflow`),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#reason-wc`, "the customer withdrew"), chromedp.SendKeys(`#op-wc`, "Ana"),
		chromedp.Click(`#cancel-workflow`), shown(`#workflow-notice`)))
	require.Equal(t, "Recorded: the workflow is cancelled. Its steps not recorded yet are never recorded.", pageText(t, a, `#workflow-notice`))
	require.Equal(t, "/workflows/wf:stuck", eval[string](t, a, `location.pathname`))
	require.False(t, eval[bool](t, a, `!!document.querySelector('#cancel-workflow')`), "a cancelled workflow offers no cancellation")
	wf, err := l.GetWorkflow(ctx, "wf:stuck")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowCancelled, wf.Status)
	require.NotNil(t, wf.Cancelled)
	require.Equal(t, consoleActor(t, l, token, "Ana"), wf.Cancelled.Operator)
	require.Equal(t, "the customer withdrew", wf.Cancelled.Reason)
	require.Equal(t, "b", wf.Cancelled.Step)
	require.NoError(t, chromedp.Do(a, chromedp.Reload(), chromedp.WaitVisible(`#cancelled`)))
	require.False(t, eval[bool](t, a, `!!document.querySelector('#workflow-notice')`), "the notice is shown once")

	// Stale: the failed step is retried and cancelled again while tab b
	// looks at the workflow.
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(srv.URL+"/workflows/wf:failed"), chromedp.WaitVisible(`#cancel-workflow`)))
	offset.Add(int64(time.Second))
	_, _, err = l.Resolve(ctx, "wf:failed/create", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "after all", Operator: "bob"})
	require.NoError(t, err)
	offset.Add(int64(time.Second))
	_, _, err = l.Resolve(ctx, "wf:failed/create", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "no after all", Operator: "bob"})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(b, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#reason-wc`, "nothing more to send"), chromedp.SendKeys(`#op-wc`, "Ben")))
	resp, err := chromedp.RunResponse(b, chromedp.Click(`#cancel-workflow`))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusConflict, resp.Status)
	require.NoError(t, chromedp.Do(b, chromedp.WaitVisible(`#err-wc`)))
	require.Equal(t, "The workflow has changed since you opened this page: it is now failed, at step create. Yours was not recorded. Look again before deciding.",
		pageText(t, b, `#err-wc`))
	require.Equal(t, "err-wc", eval[string](t, b, `document.activeElement.id`), "the refusal has the focus")
	require.Equal(t, []string{"nothing more to send", "Ben"},
		eval[[]string](t, b, `[document.querySelector('#reason-wc').value, document.querySelector('#op-wc').value]`), "what was typed is kept")
	require.Equal(t, "/workflows/wf:failed", eval[string](t, b, `location.pathname`), "a reload reads the workflow again")
	wf, err = l.GetWorkflow(ctx, "wf:failed")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowFailed, wf.Status, "nothing recorded")
	require.Equal(t, wf.UpdatedAt.UTC().Format(time.RFC3339Nano),
		eval[string](t, b, `document.querySelector('form:has(#cancel-workflow) input[name=seen]').value`), "the form now names the workflow as shown")
	// Sent again from the page as it is now, it is recorded.
	require.NoError(t, chromedp.Do(b, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Click(`#cancel-workflow`), shown(`#workflow-notice`)))
	wf, err = l.GetWorkflow(ctx, "wf:failed")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowCancelled, wf.Status)
	require.Equal(t, "nothing more to send", wf.Cancelled.Reason)
	requireAccessible(t, b)
}

// TestCancelWorkflowRefusals: the cancel form posted over plain HTTP.
// A read-only session is offered no form and a post is refused (403); a
// post from another origin is refused (403); one without a reason is
// refused (400) with what was typed; one from a page drawn before the
// workflow changed is refused (409); one for a workflow whose step has
// not finished is refused (409) and offered no form; a double submit is
// answered as a replay. None records anything but the one cancellation.
func TestCancelWorkflowRefusals(t *testing.T) {
	t.Parallel()
	l, token, c, offset := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	stuckWorkflow(t, l, "wf:s")
	failedWorkflow(t, l, "wf:f")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	path := "/workflows/" + url.PathEscape("wf:s") + "/cancel"
	form := workflowFormOf(t, s.get("/workflows/wf:s"))

	readToken, _, err := l.CreateToken(ctx, "wall-screen", opledger.ReadOnly)
	require.NoError(t, err)
	viewer := signIn(t, srv.URL, readToken)
	page := viewer.get("/workflows/wf:s")
	require.NotContains(t, page, "/cancel", "no form for a read-only session")
	require.Contains(t, page, `id="cannot-decide"`)
	vcsrf := csrfField.FindStringSubmatch(page)
	require.Len(t, vcsrf, 2)
	code, body := viewer.post(path, url.Values{"csrf": {vcsrf[1]}, "seen": form["seen"], "reason": {"looks done"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "This session cannot decide")

	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(url.Values{"csrf": form["csrf"],
		"seen": form["seen"], "reason": {"cross"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := s.hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin")

	code, _ = s.post(path, url.Values{"csrf": {"0000"}, "seen": form["seen"], "reason": {"no token"}})
	require.Equal(t, http.StatusForbidden, code, "no CSRF token")

	// Without a session (it ended while the page was open): nothing is
	// done, and signing in again leads back to the workflow's page.
	resp, err = http.PostForm(srv.URL+path, url.Values{"seen": form["seen"], "reason": {"signed out"}})
	require.NoError(t, err)
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, string(out), `/login?next=`+url.QueryEscape("/workflows/wf:s"))

	code, body = s.post(path, url.Values{"csrf": form["csrf"], "seen": form["seen"], "reason": {"   "}, "operator": {"Maria"}})
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "Write a reason")
	require.Contains(t, body, `value="Maria"`, "the name typed is kept")
	require.Contains(t, body, `aria-invalid="true" aria-describedby="err-wc"`)

	code, body = s.post(path, url.Values{"csrf": form["csrf"], "reason": {"no seen"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "This form does not say which version of the workflow you saw")

	// Stale: the failed workflow changes after its page was drawn.
	fpath := "/workflows/" + url.PathEscape("wf:f") + "/cancel"
	fform := workflowFormOf(t, s.get("/workflows/wf:f"))
	offset.Add(int64(time.Second))
	_, _, err = l.Resolve(ctx, "wf:f/create", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "after all"})
	require.NoError(t, err)
	code, body = s.post(fpath, url.Values{"csrf": fform["csrf"], "seen": fform["seen"], "reason": {"stale page"}, "operator": {"Ben"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "The workflow has changed since you opened this page: it is now running, at step create. Yours was not recorded.")
	require.NotContains(t, body, `id="cancel-workflow"`, "its step is pending: no form")
	// Posted anyway for a workflow whose step has not finished, from its
	// page as it is now.
	f, err := l.GetWorkflow(ctx, "wf:f")
	require.NoError(t, err)
	code, body = s.post(fpath, url.Values{"csrf": fform["csrf"], "seen": {f.UpdatedAt.UTC().Format(time.RFC3339Nano)}, "reason": {"pending"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "This workflow cannot be cancelled now")
	f, err = l.GetWorkflow(ctx, "wf:f")
	require.NoError(t, err)
	require.Nil(t, f.Cancelled, "nothing recorded")

	// Recorded, then the same form sent again: a replay.
	sent := url.Values{"csrf": form["csrf"], "seen": form["seen"], "reason": {"customer left"}, "operator": {"Maria"}}
	code, body = s.post(path, sent)
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Contains(t, s.get("/workflows/wf:s"), "Recorded: the workflow is cancelled.")
	code, body = s.post(path, sent)
	require.Equal(t, http.StatusSeeOther, code, body)
	page = s.get("/workflows/wf:s")
	require.Contains(t, page, "Already recorded: this decision had been made, so nothing changed.")
	require.NotContains(t, page, "Recorded: the workflow is cancelled.")
	wf, err := l.GetWorkflow(ctx, "wf:s")
	require.NoError(t, err)
	require.Equal(t, consoleActor(t, l, token, "Maria"), wf.Cancelled.Operator)
	// Another cancellation from the same old page: refused, stale.
	code, body = s.post(path, url.Values{"csrf": form["csrf"], "seen": form["seen"], "reason": {"other"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, html.UnescapeString(body), "The workflow was cancelled since you opened this page, by "+wf.Cancelled.Operator+" at step b: customer left.")
}

// TestCancelWorkflowWhileStoreBusy: a cancellation refused because
// another process held the store's lock is shown on the workflow's page
// with what was typed (503); sent again once the lock is gone, it is
// recorded.
func TestCancelWorkflowWhileStoreBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme", SQLiteBusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	c, err := console.New(l, console.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	stuckWorkflow(t, l, "wf:busy")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	form := workflowFormOf(t, s.get("/workflows/wf:busy"))
	form.Set("reason", "Checked: not wanted any more")
	form.Set("operator", "Maria")

	release := testdb.HoldLock(t, dsn, "acme", "wf:busy/a")
	code, body := s.post("/workflows/wf:busy/cancel", form)
	release()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "nothing was recorded. Send it again.")
	require.Contains(t, body, "Checked: not wanted any more</textarea>", "the reason typed is kept")
	require.Contains(t, body, `value="Maria"`)
	wf, err := l.GetWorkflow(ctx, "wf:busy")
	require.NoError(t, err)
	require.Nil(t, wf.Cancelled, "nothing recorded")

	code, body = s.post("/workflows/wf:busy/cancel", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	wf, err = l.GetWorkflow(ctx, "wf:busy")
	require.NoError(t, err)
	require.Equal(t, opledger.WorkflowCancelled, wf.Status)
}
