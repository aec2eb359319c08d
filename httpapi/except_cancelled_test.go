package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestListExceptCancelled: GET /v1/operations?except_cancelled=true lists
// what the console's exception queue lists (opledger.ListOptions.
// ExceptCancelled): the failed operations that still need a decision,
// without those an operator cancelled nor the failed step of a workflow
// an operator cancelled. It takes true or false only, and a cursor of
// such a list continues it alone.
func TestListExceptCancelled(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			reject := func(key string) {
				t.Helper()
				c, err := b.ledger.Claim(ctx, key, opledger.ClaimOptions{})
				require.NoError(t, err)
				_, err = b.ledger.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "invalid"})
				require.NoError(t, err)
			}
			for _, key := range []string{"x:rejected", "x:cancelled", "x:rejected-2"} {
				_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			}
			reject("x:rejected")
			_, _, err := b.ledger.Resolve(ctx, "x:cancelled", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
			require.NoError(t, err)
			// A workflow whose step failed, given up on by an operator:
			// its step stays failed, and needs no decision.
			_, _, err = b.ledger.PutWorkflow(ctx, "wf:x", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
			require.NoError(t, err)
			reject("wf:x/a")
			_, _, err = b.ledger.CancelWorkflow(ctx, "wf:x", opledger.WorkflowCancel{Operator: "ana", Reason: "customer left"})
			require.NoError(t, err)
			reject("x:rejected-2")

			list := func(query string) ([]string, string) {
				t.Helper()
				status, body := b.raw(t, "GET", "/v1/operations?"+query, b.token, nil)
				require.Equal(t, http.StatusOK, status, "%s: %s", query, body)
				var page opledger.Page
				require.NoError(t, json.Unmarshal(body, &page))
				var keys []string
				for _, op := range page.Items {
					keys = append(keys, op.Key)
				}
				return keys, page.NextCursor
			}
			all, _ := list("state=failed")
			require.ElementsMatch(t, []string{"wf:x/a", "x:rejected-2", "x:cancelled", "x:rejected"}, all)
			queue, _ := list("state=failed&except_cancelled=true")
			require.ElementsMatch(t, []string{"x:rejected-2", "x:rejected"}, queue)
			want, err := b.ledger.List(ctx, opledger.ListOptions{States: []opledger.State{opledger.StateFailed}, ExceptCancelled: true})
			require.NoError(t, err)
			require.Len(t, want.Items, len(queue), "the library's list")
			n, err := b.ledger.CountFailedNeedingDecision(ctx)
			require.NoError(t, err)
			require.Equal(t, n, len(queue), "what the console counts")
			withFalse, _ := list("state=failed&except_cancelled=false")
			require.Equal(t, all, withFalse)

			// Its pages: a cursor continues this list, not another.
			first, cursor := list("state=failed&except_cancelled=true&limit=1")
			require.Equal(t, queue[:1], first)
			require.NotEmpty(t, cursor)
			rest, next := list("state=failed&except_cancelled=true&cursor=" + url.QueryEscape(cursor))
			require.Equal(t, queue[1:], rest)
			require.Empty(t, next)
			status, body := b.raw(t, "GET", "/v1/operations?state=failed&cursor="+url.QueryEscape(cursor), b.token, nil)
			require.Equal(t, http.StatusBadRequest, status, "%s", body)
			require.Contains(t, string(body), "cursor does not continue this list")

			for _, v := range []string{"1", "yes", "TRUE"} {
				status, body := b.raw(t, "GET", "/v1/operations?except_cancelled="+v, b.token, nil)
				require.Equal(t, http.StatusBadRequest, status, "%s", body)
				require.Equal(t, "invalid_input", problemKind(t, body))
				require.Contains(t, string(body), "except_cancelled must be true or false")
			}
		})
	}
}
