package console_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestLongKeysKeepColumnsInView: on a desktop screen, one key of the
// longest kind (200 characters, no space) in the exception queue, the
// operations, workflows or events list wraps within its column instead of
// widening the table to twice the screen, which pushed every row's state,
// owner and review time out of view; short keys stay on one line.
func TestLongKeysKeepColumnsInView(t *testing.T) {
	t.Parallel()
	b := start(t)
	ctx := context.Background()
	long := strings.Repeat("segment.of/a:long-key/", 10)[:199] + "Z"
	heldOp(t, b.ledger, opledger.Intent{Key: long, Owner: "ops-team"}, "timeout", "no lookup")
	heldOp(t, b.ledger, opledger.Intent{Key: "DEMO-MAIL-017", Owner: "ops-team"}, "timeout", "no lookup")
	for _, key := range []string{long[:190], "wf:17"} {
		_, _, err := b.ledger.PutWorkflow(ctx, key, opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
			{Name: "s", Action: "a", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
		require.NoError(t, err)
	}
	for _, id := range []string{long[:190], "evt-847"} {
		_, err := b.ledger.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: id, Type: "t", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	bc := browser(t)
	browserSignIn(t, bc, b.url, b.token)
	require.NoError(t, chromedp.Do(bc, chromedp.EmulateViewport(1280, 900)))
	for path, short := range map[string]string{"/": "DEMO-MAIL-017", "/operations": "DEMO-MAIL-017", "/workflows": "wf:17", "/events": "forms/evt-847"} {
		require.NoError(t, chromedp.Do(bc, chromedp.Navigate(b.url+path), chromedp.WaitVisible(`table.queue`)))
		box := eval[[]int](t, bc, `(s => [s.scrollWidth, s.clientWidth])(document.querySelector('table.queue').closest('.scroll'))`)
		require.LessOrEqual(t, box[0], box[1]+1, "%s: the table fits its box (%d px wide in %d)", path, box[0], box[1])
		// An inline element broken over lines has boxes on several lines.
		broken := eval[[]string](t, bc, `[...document.querySelectorAll('table.queue tbody th a')].filter(e => new Set([...e.getClientRects()].map(r => Math.round(r.top))).size > 1).map(e => e.textContent)`)
		require.NotContains(t, broken, short, "%s: a short key on one line", path)
	}
}
