package console_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// unreconciledMark is the mark of an uncertain operation whose
// destination no reconciler of the console's process serves for the
// tenant, on the exception queue, the operations list and its page.
const unreconciledMark = "no reconciler here: needs a person"

// marksOf is, by key, the text of the unreconciled mark of each row of
// the table sel in the browser's page ("" for a row without one).
func marksOf(t *testing.T, ctx context.Context, sel string) map[string]string {
	t.Helper()
	return eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('`+sel+` tbody tr')].map(tr =>
		[tr.querySelector('th').textContent.trim(), (tr.querySelector('.unreconciled') || {textContent: ''}).textContent.trim()]))`)
}

// TestQueueMarksWhatNothingReconciles: the exception queue listed an
// uncertain operation that no reconciler of the server serves like any
// other, as if a reconciler might still settle it; only its own page
// said that nothing here looks it up. Its row now carries a mark that
// says so, and the caption counts them; a row whose destination the
// server's reconciler serves, and a held one, carry none. The operations
// list marks it the same way, its page shows the same mark above the
// advice (and to a read-only session, which is given no advice), and a
// console that was not told (Options.Reconciled nil) marks nothing.
func TestQueueMarksWhatNothingReconciles(t *testing.T) {
	t.Parallel()
	l, token, srv, _ := storeConsoleOptions(t, testdb.SQLiteDSN(t), opledger.Options{}, console.Options{
		Reconciled: func(tenant, dest string) bool { return tenant == "acme" && dest == "crm" }})
	uncertainOp(t, l, "u:crm", "crm")
	uncertainOp(t, l, "u:mailer", "mailer")
	heldOp(t, l, opledger.Intent{Key: "h:mailer", Action: "send", Destination: "mailer"}, "timeout", "no lookup")
	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)

	marks := marksOf(t, ctx, "table.queue")
	require.Equal(t, map[string]string{"u:crm": "", "u:mailer": unreconciledMark, "h:mailer": ""}, marks,
		"only the uncertain row no reconciler serves is marked")
	caption := pageText(t, ctx, "table.queue caption")
	require.Contains(t, caption, "1 uncertain operation shown is marked “no reconciler here”: no reconciler of this server serves its destination for this tenant, so nothing here will look it up and it stays uncertain until a person decides.")
	requireAccessible(t, ctx)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/operations"), shown(`#operations`)))
	require.Equal(t, map[string]string{"u:crm": "", "u:mailer": unreconciledMark, "h:mailer": ""}, marksOf(t, ctx, "#operations"),
		"the operations list marks the same rows")
	require.Contains(t, pageText(t, ctx, "#operations caption"), "Marked “no reconciler here”: an uncertain operation whose destination no reconciler of this server serves for this tenant")

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), shown(`table.queue`),
		chromedp.Click(`a[href="/operations/u:mailer"]`), shown(`#guidance`)))
	require.Equal(t, unreconciledMark, pageText(t, ctx, "#unreconciled"), "the page shows the mark of its row")
	require.Contains(t, pageText(t, ctx, "#guidance"), "Nothing here will look it up")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/operations/u:crm"), shown(`#guidance`)))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('.unreconciled').length`), "served: no mark")

	// A phone shows the mark in the row's State line, within the screen.
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(srv.URL+"/"), shown(`table.queue`)))
	require.False(t, eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`), "the queue fits a phone screen")
	require.True(t, eval[bool](t, ctx, `(() => { const m = document.querySelector('table.queue .unreconciled');
		return m.offsetWidth > 0 && m.closest('td').dataset.label === 'State'; })()`), "the mark is visible in the State cell")

	// A read-only session is given no advice: the mark still says it.
	readToken, _, err := l.CreateToken(context.Background(), "wall-screen", opledger.ReadOnly)
	require.NoError(t, err)
	page := signIn(t, srv.URL, readToken).get("/operations/u:mailer")
	require.Contains(t, page, `id="unreconciled"`)
	require.Contains(t, page, unreconciledMark)

	// Not told: no mark anywhere, no count.
	l, token, srv, _ = storeConsoleOptions(t, testdb.SQLiteDSN(t), opledger.Options{}, console.Options{})
	uncertainOp(t, l, "u:mailer", "mailer")
	s := signIn(t, srv.URL, token)
	for _, path := range []string{"/", "/operations", "/operations/u:mailer"} {
		page := s.get(path)
		require.Contains(t, page, "u:mailer", path)
		require.NotContains(t, page, "unreconciled", path)
		require.NotContains(t, page, "no reconciler here", path)
	}
}
