package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestLongKeysKeepColumnsInView: on a desktop screen, one key of the
// longest kind (200 characters, no space) in the exception queue, the
// operations, workflows or events list, or the dashboard's duplicate
// effects, wraps within its column instead of widening the table to twice
// the screen, which pushed every row's state, owner and review time (the
// duplicates' destination, count and reference) out of view; short keys
// stay on one line.
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
	check := func(base, path, table, short string) {
		t.Helper()
		require.NoError(t, chromedp.Do(bc, chromedp.Navigate(base+path), chromedp.WaitVisible(table)))
		box := eval[[]int](t, bc, `(s => [s.scrollWidth, s.clientWidth])(document.querySelector('`+table+`').closest('.scroll'))`)
		require.LessOrEqual(t, box[0], box[1]+1, "%s: the table fits its box (%d px wide in %d)", path, box[0], box[1])
		// An inline element broken over lines has boxes on several lines.
		broken := eval[[]string](t, bc, `[...document.querySelectorAll('`+table+` tbody th a')].filter(e => new Set([...e.getClientRects()].map(r => Math.round(r.top))).size > 1).map(e => e.textContent)`)
		require.NotContains(t, broken, short, "%s: a short key on one line", path)
		require.Contains(t, eval[string](t, bc, `document.querySelector('`+table+`').textContent`), short, path)
	}
	for path, short := range map[string]string{"/": "DEMO-MAIL-017", "/operations": "DEMO-MAIL-017", "/workflows": "wf:17", "/events": "forms/evt-847"} {
		check(b.url, path, `table.queue`, short)
	}

	// The dashboard's duplicate effects, on a console whose clock passes
	// a lease: signed in last, as the browser keeps one session cookie
	// for both servers of 127.0.0.1.
	l, token, c, offset := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	d := duplicates{t: t, l: l, offset: offset}
	// 190 bytes: its references ("second-" and the key) stay within 200.
	for _, key := range []string{long[:190], "DUP-MAIL-017"} {
		d.twice(key, d.lose(key))
	}
	browserSignIn(t, bc, srv.URL, token)
	check(srv.URL, "/dashboard", `#duplicates`, "DUP-MAIL-017")
}
