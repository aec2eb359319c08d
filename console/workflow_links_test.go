package console_test

import (
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
		chromedp.Click(`a[href="/workflows/onb:1"]`), chromedp.WaitVisible(`ol.steps`)))
	require.Equal(t, "← Workflows", eval[string](t, ctx, `document.querySelector('#back-to-workflows')?.textContent ?? "no link back"`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#back-to-workflows`), chromedp.WaitVisible(`#open-by-key`)))
	require.Equal(t, srv.URL+"/workflows", eval[string](t, ctx, `location.href`))
	require.Equal(t, "Workflows", pageText(t, ctx, `h1`))
}
