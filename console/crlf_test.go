package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A browser sends a textarea's line breaks as CR LF, two bytes each, so
// the script counts them so: a reason of 2000 characters, a thousand of
// them line breaks, is 2000 bytes in the page but about 3000 sent, and is
// refused before it is sent, not by the server after it.
func TestReasonLineBreaksCountedAsSent(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "crlf:1"}, "timeout", "no lookup")
	srv := serveCounting(t, c)
	ctx := browser(t)
	browserSignIn(t, ctx, srv.url, token)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.url+"/operations/crlf:1"), chromedp.WaitVisible(`#decide-retry`),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.Evaluate[chromedp.Void](`(() => { const el = document.querySelector('#reason-r');
			el.value = 'checked\n'.repeat(250); el.dispatchEvent(new Event('input', {bubbles: true})); })()`)))
	require.Equal(t, 2000, eval[int](t, ctx, `document.querySelector('#reason-r').value.length`))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(`#decide-retry`)))
	require.Equal(t, "At most 2000 bytes: this is 2250.", eval[string](t, ctx, `document.querySelector('#reason-r').validationMessage`))
	require.Zero(t, srv.posts.Load(), "nothing was sent")
}
