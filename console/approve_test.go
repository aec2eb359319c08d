package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

var (
	versionField     = regexp.MustCompile(`name="version" value="([0-9]+)"`)
	fingerprintField = regexp.MustCompile(`name="fingerprint" value="([^"]+)"`)
)

// approvalOf is the approval form's fields on an operation page.
func approvalOf(t *testing.T, page string) url.Values {
	t.Helper()
	c := csrfField.FindStringSubmatch(page)
	require.Len(t, c, 2, "the page has a CSRF token")
	v := versionField.FindStringSubmatch(page)
	require.Len(t, v, 2, "the page has an approval form")
	f := fingerprintField.FindStringSubmatch(page)
	require.Len(t, f, 2)
	s := seenField.FindStringSubmatch(page)
	require.Len(t, s, 2)
	return url.Values{"csrf": {c[1]}, "version": {v[1]}, "fingerprint": {html.UnescapeString(f[1])}, "seen": {html.UnescapeString(s[1])}}
}

// An operation awaiting approval is approved on its page, for exactly
// the version the page showed: content revised since is refused, the same
// form sent twice records nothing the second time, and once approved the
// page offers no approval.
func TestApproveForm(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	_, _, err := l.Record(ctx, opledger.Intent{Key: "mail:1", Action: "email.send", Destination: "email", RequiresApproval: true,
		Payload: json.RawMessage(`{"to":"ana@example.invalid","body":"Hello"}`), SensitiveFields: []string{"to"}})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/operations/mail:1")
	require.Contains(t, page, `action="/operations/mail:1/approve"`)
	require.Contains(t, page, "Approve version 1")
	require.NotContains(t, page, "ana@example.invalid", "the approval form shows the masked payload only")
	stale := approvalOf(t, page)
	stale.Set("approver", "Lea")

	// Revised while the page was open: the old version's approval is refused.
	_, _, err = l.Revise(ctx, "mail:1", opledger.Revision{Payload: json.RawMessage(`{"to":"ana@example.invalid","body":"Hi"}`), Version: 2})
	require.NoError(t, err)
	code, body := s.post("/operations/mail:1/approve", stale)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "The content was revised since you opened this page: it is now version 2. Yours was not recorded.")
	require.Contains(t, body, `value="Lea"`, "the name typed is kept")
	require.Contains(t, body, "Approve version 2", "the page drawn again offers the new version")
	op, err := l.Get(ctx, "mail:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, op.State)

	// A form naming content the operation never had (a version it has not
	// reached, or its version with another fingerprint) is not said to
	// have been revised since.
	for _, tc := range []struct{ version, fingerprint string }{{"3", ""}, {"2", "sha256:" + strings.Repeat("0", 64)}} {
		forged := approvalOf(t, s.get("/operations/mail:1"))
		forged.Set("version", tc.version)
		if tc.fingerprint != "" {
			forged.Set("fingerprint", tc.fingerprint)
		}
		code, body = s.post("/operations/mail:1/approve", forged)
		require.Equal(t, http.StatusConflict, code)
		require.Contains(t, body, "This form names content the operation never had (version "+tc.version+" with another fingerprint than its own); it is at version 2.")
		require.NotContains(t, body, "revised since")
	}

	// A form without its version is refused, not taken for version 0.
	missing := approvalOf(t, s.get("/operations/mail:1"))
	missing.Del("version")
	code, body = s.post("/operations/mail:1/approve", missing)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "does not say which version")

	form := approvalOf(t, s.get("/operations/mail:1"))
	form.Set("approver", "Lea")
	code, body = s.post("/operations/mail:1/approve", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	page = s.get("/operations/mail:1")
	require.Contains(t, page, `<p class="notice" role="status">Recorded: approved. A worker sends this content when it is due.</p>`)
	require.NotContains(t, page, `/approve"`, "no approval form once approved")
	op, err = l.Get(ctx, "mail:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.Equal(t, int64(2), op.Version)
	require.Equal(t, consoleActor(t, l, token, "Lea"), op.ApprovedBy)

	// Sent again (a double click): nothing recorded, and the page says so.
	before, err := l.Timeline(ctx, "mail:1")
	require.NoError(t, err)
	code, body = s.post("/operations/mail:1/approve", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Contains(t, s.get("/operations/mail:1"), "Already recorded: this decision had been made, so nothing changed.")
	after, err := l.Timeline(ctx, "mail:1")
	require.NoError(t, err)
	require.Len(t, after, len(before))

	// Another name now is another approval, which nothing awaits.
	form.Set("approver", "Sam")
	code, body = s.post("/operations/mail:1/approve", form)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "Version 2 was approved already, by Lea (console,")
}

// In a browser: the approval form is labelled, asks before it approves,
// and the page then shows the operation pending with the notice.
func TestApproveInBrowser(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	_, _, err := l.Record(context.Background(), opledger.Intent{Key: "mail:2", Action: "email.send", Destination: "email",
		RequiresApproval: true, Payload: json.RawMessage(`{"body":"Hello"}`)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/operations/mail:2"), chromedp.WaitVisible(`#approve`)))
	requireAccessible(t, ctx)
	// Declined at the confirmation: nothing is sent.
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.confirm = () => false`), chromedp.Click(`#approve`)))
	op, err := l.Get(context.Background(), "mail:2")
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, op.State)
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(`#approver`, "Lea"), chromedp.Click(`#approve`), shown(`p.notice`)))
	require.Contains(t, pageText(t, ctx, `p.notice`), "Recorded: approved")
	require.Contains(t, pageText(t, ctx, `h1`), "pending")
	require.Contains(t, pageText(t, ctx, `#timeline`), "approved")
}

// The workflow page says where each step stands on approval: a step that
// was approved (and may have run since) no longer reads "needs approval".
func TestWorkflowStepApprovalShown(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	yes := true
	_, _, err := l.PutWorkflow(ctx, "wf:ap", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`), RequiresApproval: &yes},
		{Name: "b", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`), RequiresApproval: &yes},
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	page := s.get("/workflows/wf:ap")
	require.Contains(t, page, "version 1, awaits approval")
	require.Contains(t, page, "version 1, needs approval before it runs")

	a, err := l.Get(ctx, "wf:ap/a")
	require.NoError(t, err)
	_, _, err = l.Approve(ctx, "wf:ap/a", opledger.Approval{Version: a.Version, Fingerprint: a.Fingerprint, Approver: "Lea"})
	require.NoError(t, err)
	claim, err := l.Claim(ctx, "wf:ap/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:ap/a", claim.AttemptID, claim.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1"})
	require.NoError(t, err)
	page = s.get("/workflows/wf:ap")
	require.Contains(t, page, "version 1, approved by <bdi>Lea</bdi>", "the succeeded step says who approved it")
	require.NotContains(t, page, "awaits approval")
}
