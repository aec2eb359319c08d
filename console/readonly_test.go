package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestReadOnlySession: a session signed in with a read-only token shows
// every page, marked read-only, but offers no decision: a held operation
// and one awaiting approval say why there is no form, and a decision
// posted anyway, with the session's CSRF token and the page's seen field,
// is refused (403) and records nothing. Signing out still works, and so
// does the lab, which plays on a scratch ledger. A read-write session of
// the same tenant is offered the forms the read-only one is not.
func TestReadOnlySession(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	ctx := context.Background()
	_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: "refund:r9", Action: "pay.refund", Destination: "psp",
		Payload: json.RawMessage(`{"cents":900}`), RequiresApproval: true})
	require.NoError(t, err)
	readToken, info, err := b.ledger.CreateToken(ctx, "wall-screen", opledger.ReadOnly)
	require.NoError(t, err)
	require.Equal(t, opledger.ReadOnly, info.Access)

	writer := signIn(t, b.url, b.token)
	require.Contains(t, writer.get("/operations/intake:I17:create"), `action="/operations/intake:I17:create/resolve"`,
		"a read-write session is offered the decisions")
	require.NotContains(t, writer.get("/"), `id="read-only-session"`)

	reader := signIn(t, b.url, readToken)
	for _, path := range []string{"/", "/operations", "/events", "/workflows", "/workflows/wf-17", "/dashboard", "/lab"} {
		require.Contains(t, reader.get(path), `id="read-only-session"`, "%s is marked read-only", path)
	}
	held := reader.get("/operations/intake:I17:create")
	require.NotContains(t, held, "/resolve", "no decision form")
	require.Contains(t, held, `id="read-only"`)
	require.Contains(t, held, "This operation waits for a decision, but this session is read-only")
	waiting := reader.get("/operations/refund:r9")
	require.NotContains(t, waiting, "/approve", "no approval form")
	require.Contains(t, waiting, "This operation waits for a person to approve it, but this session is read-only")
	require.NotContains(t, reader.get("/operations/order:16:prepare"), `id="read-only"`, "nothing to decide, nothing said")

	// Posted anyway, with everything a form would carry.
	csrf := csrfField.FindStringSubmatch(held)
	require.Len(t, csrf, 2, "the sign-out form carries the CSRF token")
	op, err := b.ledger.Get(ctx, "intake:I17:create")
	require.NoError(t, err)
	seen := op.UpdatedAt.UTC().Format(time.RFC3339Nano)
	code, body := reader.post("/operations/intake:I17:create/resolve", url.Values{"csrf": {csrf[1]}, "seen": {seen},
		"decision": {"cancel"}, "reason": {"looks done"}, "operator": {"viewer"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "This session is read-only")
	code, body = reader.post("/operations/refund:r9/approve", url.Values{"csrf": {csrf[1]}, "version": {"1"},
		"fingerprint": {op.Fingerprint}, "approver": {"viewer"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "This session is read-only")
	for key, want := range map[string]opledger.State{"intake:I17:create": opledger.StateHeld, "refund:r9": opledger.StateAwaitingApproval} {
		op, err := b.ledger.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, want, op.State, "%s: nothing recorded", key)
	}

	// The lab is open to it: it never writes to the served ledger.
	code, body = reader.post("/lab/lost-response", url.Values{"csrf": {csrf[1]}, "step": {"send"}})
	require.Equal(t, http.StatusSeeOther, code, body)

	code, _ = reader.post("/logout", url.Values{"csrf": {csrf[1]}})
	require.Equal(t, http.StatusSeeOther, code)
	resp, err := reader.hc.Get(b.url + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out")
}

// TestReadOnlySessionInBrowser: in a browser, a read-only session's
// header says so, and a held operation's page shows why it offers no
// decision, with no form to post.
func TestReadOnlySessionInBrowser(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	readToken, _, err := b.ledger.CreateToken(context.Background(), "wall-screen", opledger.ReadOnly)
	require.NoError(t, err)
	ctx := browser(t)
	browserSignIn(t, ctx, b.url, readToken)
	require.Equal(t, "read-only", pageText(t, ctx, `#read-only-session`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"/operations/intake:I17:create"), chromedp.WaitVisible(`#read-only`)))
	require.Contains(t, pageText(t, ctx, `#read-only`), "this session is read-only")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('form[action$="/resolve"], form[action$="/approve"]').length`))
	requireAccessible(t, ctx)
	screenshot(t, ctx, "read-only")
	require.True(t, strings.HasPrefix(pageText(t, ctx, `h1`), "intake:I17:create"), "the operation's page")
}
