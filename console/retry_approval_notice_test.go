package console_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestRetryAwaitingApprovalNotice: a retry authorized in the browser for
// an operation cancelled before its content was approved does not send
// it: the operation awaits approval again, and the notice says so, and
// names its owner, who decides, when it has one; not that one more
// attempt is authorized. On both stores.
func TestRetryAwaitingApprovalNotice(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			ctx := context.Background()
			l, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})
			for key, owner := range map[string]string{"refund:1": "finance", "refund:2": ""} {
				_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "payments.refund", Destination: "payments", Owner: owner,
					RequiresApproval: true, Payload: json.RawMessage(`{"cents":4900}`)})
				require.NoError(t, err)
				_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "wrong amount?"})
				require.NoError(t, err)
			}
			bctx := browser(t)
			browserSignIn(t, bctx, srv.URL, token)
			for key, want := range map[string]string{
				"refund:1": "it now awaits approval by its owner, finance, before any attempt",
				"refund:2": "it now awaits approval before any attempt",
			} {
				require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/operations/"+key), chromedp.WaitVisible(`#decide-retry`),
					chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
					chromedp.SendKeys(`#reason-r`, "the amount was right after all"), chromedp.Click(`#decide-retry`),
					shown(`p.notice`)))
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.StateAwaitingApproval, op.State)
				notice := pageText(t, bctx, `p.notice`)
				require.NotContains(t, notice, "one more attempt is authorized", key)
				require.Contains(t, notice, want, key)
				require.Contains(t, pageText(t, bctx, `h1`), "awaiting_approval")
				require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(`#approve`)), "the page offers the approval")
				if key == "refund:2" {
					require.NotContains(t, notice, "by its owner")
				}
			}
		})
	}
}
