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

// TestSessionsThatMayNotDecide: a session signed in with a read-only or
// a worker token shows every page, marked with its token's access, but
// offers no decision: a held operation and one awaiting approval say why
// there is no form, and a decision posted anyway, with the session's CSRF
// token and the page's seen field, is refused (403) and records nothing.
// Signing out still works, and so does the lab, which plays on a scratch
// ledger. A read-write session of the same tenant is offered the forms
// the others are not.
func TestSessionsThatMayNotDecide(t *testing.T) {
	t.Parallel()
	b := start(t)
	b.seed(t)
	ctx := context.Background()
	_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: "refund:r9", Action: "pay.refund", Destination: "psp",
		Payload: json.RawMessage(`{"cents":900}`), RequiresApproval: true})
	require.NoError(t, err)

	writer := signIn(t, b.url, b.token)
	require.Contains(t, writer.get("/operations/intake:I17:create"), `action="/operations/intake:I17:create/resolve"`,
		"a read-write session is offered the decisions")
	require.NotContains(t, writer.get("/"), `id="session-access"`)

	for _, access := range []opledger.TokenAccess{opledger.ReadOnly, opledger.Worker} {
		t.Run(access.String(), func(t *testing.T) {
			secret, info, err := b.ledger.CreateToken(ctx, "wall-screen", access)
			require.NoError(t, err)
			require.Equal(t, access, info.Access)
			viewer := signIn(t, b.url, secret)
			tag := `id="session-access" title="Signed in with a ` + access.String() + ` token: pages offer no decision">` + access.String() + `</span>`
			for _, path := range []string{"/", "/operations", "/events", "/workflows", "/workflows/wf-17", "/dashboard", "/lab"} {
				require.Contains(t, viewer.get(path), tag, "%s is marked %s", path, access)
			}
			held := viewer.get("/operations/intake:I17:create")
			require.NotContains(t, held, "/resolve", "no decision form")
			require.Contains(t, held, `id="cannot-decide"`)
			require.Contains(t, held, "This operation waits for a decision, but this session cannot take it: it was signed in with a "+access.String()+" token.")
			waiting := viewer.get("/operations/refund:r9")
			require.NotContains(t, waiting, "/approve", "no approval form")
			require.Contains(t, waiting, "This operation waits for a person to approve it, but this session cannot take it")
			require.NotContains(t, viewer.get("/operations/order:16:prepare"), `id="cannot-decide"`, "nothing to decide, nothing said")

			// Posted anyway, with everything a form would carry.
			csrf := csrfField.FindStringSubmatch(held)
			require.Len(t, csrf, 2, "the sign-out form carries the CSRF token")
			op, err := b.ledger.Get(ctx, "intake:I17:create")
			require.NoError(t, err)
			seen := op.UpdatedAt.UTC().Format(time.RFC3339Nano)
			refusal := "This session cannot decide: it was signed in with a " + access.String() + " token"
			code, body := viewer.post("/operations/intake:I17:create/resolve", url.Values{"csrf": {csrf[1]}, "seen": {seen},
				"decision": {"cancel"}, "reason": {"looks done"}, "operator": {"viewer"}})
			require.Equal(t, http.StatusForbidden, code)
			require.Contains(t, body, refusal)
			code, body = viewer.post("/operations/refund:r9/approve", url.Values{"csrf": {csrf[1]}, "version": {"1"},
				"fingerprint": {op.Fingerprint}, "approver": {"viewer"}})
			require.Equal(t, http.StatusForbidden, code)
			require.Contains(t, body, refusal)
			for key, want := range map[string]opledger.State{"intake:I17:create": opledger.StateHeld, "refund:r9": opledger.StateAwaitingApproval} {
				op, err := b.ledger.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, want, op.State, "%s: nothing recorded", key)
			}

			// The lab is open to it: it never writes to the served ledger.
			code, body = viewer.post("/lab/lost-response", url.Values{"csrf": {csrf[1]}, "step": {"send"}})
			require.Equal(t, http.StatusSeeOther, code, body)

			code, _ = viewer.post("/logout", url.Values{"csrf": {csrf[1]}})
			require.Equal(t, http.StatusSeeOther, code)
			resp, err := viewer.hc.Get(b.url + "/")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out")
		})
	}
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
	require.Equal(t, "read-only", pageText(t, ctx, `#session-access`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"/operations/intake:I17:create"), chromedp.WaitVisible(`#cannot-decide`)))
	require.Contains(t, pageText(t, ctx, `#cannot-decide`), "this session cannot take it: it was signed in with a read-only token")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('form[action$="/resolve"], form[action$="/approve"]').length`))
	requireAccessible(t, ctx)
	screenshot(t, ctx, "read-only")
	require.True(t, strings.HasPrefix(pageText(t, ctx, `h1`), "intake:I17:create"), "the operation's page")
}
