package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestWorkflowPageLinksBack: in a browser, a workflow's page links back
// to the workflows list, as an event's page links back to the events.
func TestWorkflowPageLinksBack(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	putWorkflow(t, l, "onb:1", "", "")
	srv := httptest.NewServer(c)
	defer srv.Close()
	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/workflows"), chromedp.WaitVisible(`a[href="/workflows/onb:1"]`),
		chromedp.Click(`a[href="/workflows/onb:1"]`), shown(`ol.steps`)))
	require.Equal(t, "← Workflows", eval[string](t, ctx, `document.querySelector('#back-to-workflows')?.textContent ?? "no link back"`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#back-to-workflows`), shown(`#open-by-key`)))
	require.Equal(t, srv.URL+"/workflows", eval[string](t, ctx, `location.href`))
	require.Equal(t, "Workflows", pageText(t, ctx, `h1`))
}

// TestStepKeyWithSlash: a workflow step's key holds a "/"
// (<workflow>/<step>). In a browser, the workflow page's link to its
// step opens the step's page, and so does its key typed with a raw "/"
// in the address bar (the console sends it to the escaped address), as
// does a workflow key with a "/"; a decision's address typed as a link
// stays refused (405).
func TestStepKeyWithSlash(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	putWorkflow(t, l, "onb:1", opledger.OutcomeUncertain, "no lookup")
	putWorkflow(t, l, "team/onb:2", opledger.OutcomeUncertain, "no lookup")
	srv := httptest.NewServer(c)
	defer srv.Close()
	ctx := browser(t)
	browserSignIn(t, ctx, srv.URL, token)
	heading := func() string {
		t.Helper()
		return eval[string](t, ctx, `document.querySelector('h1')?.firstChild?.textContent?.trim() ?? ''`)
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/workflows/onb:1"), chromedp.WaitVisible(`ol.steps`),
		chromedp.Click(`a[href="/operations/onb:1%2Fsend"]`), shown(`#timeline`)))
	require.Equal(t, "onb:1/send", heading(), "the step's link opens its page")

	for _, tc := range []struct{ typed, want, wait string }{
		{"/operations/onb:1/send", "onb:1/send", `#timeline`},
		{"/operations/team/onb:2/send", "team/onb:2/send", `#timeline`},
		{"/workflows/team/onb:2", "team/onb:2", `ol.steps`},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL+tc.typed), chromedp.WaitReady(`body`)))
		require.Equal(t, tc.want, heading(), "typed %s", tc.typed)
		require.Equal(t, 1, eval[int](t, ctx, "document.querySelectorAll(`"+tc.wait+"`).length"), "typed %s", tc.typed)
	}

	s := signIn(t, srv.URL, token)
	code, _ := s.fetch("/operations/onb:1/resolve")
	require.Equal(t, http.StatusMethodNotAllowed, code, "a decision's address is no page")
	code, _ = s.fetch("/workflows/onb:1/cancel")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	code, body := s.fetch("/operations/onb:1%2Fsend/resolve")
	require.Equal(t, http.StatusMethodNotAllowed, code, "nor is that of a step")
	require.Contains(t, body, "takes a form posted from a page of the console")
}
