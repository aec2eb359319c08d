package opledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestDecisionsNameTheirCredential: a Ledger handle WithCredential records
// the decisions it takes (revise, approve, resolve, and their workflow
// step forms) with the credential after the name given, keeps it through
// WithTenant, and changes nothing else; a handle without one records the
// name as given.
func TestDecisionsNameTheirCredential(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			const cred = "token ops-laptop, tok_0a1b2c3d4e5f"
			plain, err := l.WithTenant("acme")
			require.NoError(t, err)
			withCred, err := l.WithCredential(cred)
			require.NoError(t, err)
			via, err := withCred.WithTenant("acme")
			require.NoError(t, err, "WithTenant keeps the credential")
			_, err = l.WithCredential("token a\x00b")
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "a credential the store cannot keep")
			_, err = l.WithCredential(strings.Repeat("c", opledger.MaxCredentialBytes+1))
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "a credential too long")
			require.Equal(t, "acme", via.Tenant())

			lastActor := func(key string) string {
				t.Helper()
				tl, err := plain.Timeline(ctx, key)
				require.NoError(t, err)
				return tl[len(tl)-1].Actor
			}

			_, _, err = via.Record(ctx, opledger.Intent{Key: "a:1", Action: "crm.create", Destination: "crm",
				Payload: json.RawMessage(`{"n":1}`), RequiresApproval: true})
			require.NoError(t, err)
			op, _, err := via.Revise(ctx, "a:1", opledger.Revision{Payload: json.RawMessage(`{"n":2}`), Version: 2, Actor: "Ana"})
			require.NoError(t, err)
			require.Equal(t, "Ana ("+cred+")", lastActor("a:1"))
			op, _, err = via.Approve(ctx, "a:1", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "Ben"})
			require.NoError(t, err)
			require.Equal(t, "Ben ("+cred+")", op.ApprovedBy)
			require.Equal(t, "Ben ("+cred+")", lastActor("a:1"))
			_, _, err = via.Resolve(ctx, "a:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn"})
			require.NoError(t, err)
			require.Equal(t, "operator ("+cred+")", lastActor("a:1"), "the default name, with the credential")

			_, _, err = plain.Record(ctx, opledger.Intent{Key: "a:2", Action: "crm.create", Destination: "crm"})
			require.NoError(t, err)
			_, _, err = plain.Resolve(ctx, "a:2", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn", Operator: "Cy"})
			require.NoError(t, err)
			require.Equal(t, "Cy", lastActor("a:2"), "no credential: the name as given")

			w, _, err := via.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{RequiresApproval: true, Steps: []opledger.WorkflowStep{
				{Name: "create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}}})
			require.NoError(t, err)
			require.Equal(t, "create", w.CurrentStep)
			step := opledger.WorkflowStepKey("wf:1", "create")
			w, _, err = via.ReviseWorkflowStep(ctx, "wf:1", "create", opledger.Revision{Payload: json.RawMessage(`{"n":3}`), Version: 2, Actor: "Dee"})
			require.NoError(t, err)
			require.Equal(t, "Dee ("+cred+")", lastActor(step))
			s := w.Steps[0]
			_, _, err = via.ApproveWorkflowStep(ctx, "wf:1", "create", opledger.Approval{Version: s.Version, Fingerprint: s.Fingerprint, Approver: "Eve"})
			require.NoError(t, err)
			op, err = plain.Get(ctx, step)
			require.NoError(t, err)
			require.Equal(t, "Eve ("+cred+")", op.ApprovedBy)
		})
	}
}
