package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
)

// TestReconcileAnswersDecided: the answer to a finding says whether it
// was the decision (decided: true) or only recorded (false: uncertain
// within the visibility delay, or noted on an operation someone else
// decided while the lookup ran), beside the operation's own fields, and
// the client returns it. The answer used to be the operation alone, so
// a worker that posted a record found could not tell its finding
// settling the operation from its finding being noted on one a person
// had settled.
func TestReconcileAnswersDecided(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := startAPI(t, st.NewDSN(t), nil)
			uncertain := func(key string) int {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)}
				c, err := b.ledger.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
				require.NoError(t, err)
				op, err := b.ledger.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
				require.NoError(t, err)
				return op.AttemptCount
			}
			post := func(key, body string) map[string]any {
				t.Helper()
				status, data := b.raw(t, "POST", "/v1/operations/"+key+"/reconcile", b.token, []byte(body))
				require.Equal(t, http.StatusOK, status, string(data))
				var got map[string]any
				require.NoError(t, json.Unmarshal(data, &got))
				require.Equal(t, key, got["key"], "the operation's fields stay where they were")
				return got
			}

			// Found with the intended content: the decision.
			uncertain("d:1")
			got := post("d:1", `{"found":true,"matches":true,"destination_ref":"R1"}`)
			require.Equal(t, "succeeded", got["state"])
			require.Equal(t, true, got["decided"])

			// Nothing found within the visibility delay: recorded only.
			uncertain("d:2")
			got = post("d:2", `{"found":false,"authoritative":true,"visibility_delay_seconds":3600}`)
			require.Equal(t, "uncertain", got["state"])
			require.Equal(t, false, got["decided"])

			// A record with other content, found by a lookup begun before
			// a person cancelled the operation: noted, not decided.
			n := uncertain("d:3")
			_, _, err := b.ledger.Resolve(ctx, "d:3", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn", Operator: "maria"})
			require.NoError(t, err)
			status, data := b.raw(t, "POST", "/v1/operations/d:3/reconcile", b.token,
				[]byte(`{"found":true,"matches":false,"destination_ref":"R3","attempt_count":`+strconv.Itoa(n)+`}`))
			require.Equal(t, http.StatusOK, status, string(data))
			require.NoError(t, json.Unmarshal(data, &got))
			require.Equal(t, "failed", got["state"])
			require.Equal(t, false, got["decided"])

			// The client says the same.
			uncertain("d:4")
			op, decided, err := b.acme.Reconcile(ctx, "d:4", client.Finding{Found: true, Matches: true, DestinationRef: "R4"})
			require.NoError(t, err)
			require.True(t, decided)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R4", op.DestinationRef)
			uncertain("d:5")
			op, decided, err = b.acme.Reconcile(ctx, "d:5", client.Finding{Found: false, Authoritative: true, VisibilityDelaySeconds: 3600})
			require.NoError(t, err)
			require.False(t, decided)
			require.Equal(t, opledger.StateUncertain, op.State)
		})
	}
}
