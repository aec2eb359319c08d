package httpapi_test

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
)

// An operation recorded through the API names the token it came with, as
// a decision does: by a PUT, by a claim with an inline intent, and as the
// first step of a workflow the PUT of a workflow records.
func TestRecordNamesItsToken(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	signedIn, err := b.ledger.Authenticate(ctx, b.token)
	require.NoError(t, err)
	byToken := regexp.MustCompile(`^\S+ \(token test, ` + regexp.QuoteMeta(signedIn.ID) + `\)$`)

	_, _, err = b.acme.Record(ctx, "order:1", intent(1))
	require.NoError(t, err)
	in := intent(2)
	_, err = b.acme.Claim(ctx, "order:2", client.ClaimRequest{Worker: "w1", Intent: &in})
	require.NoError(t, err)
	_, _, err = b.acme.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	for _, key := range []string{"order:1", "order:2", "wf:1/a"} {
		d, err := b.acme.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, "recorded", d.Timeline[0].Event)
		require.Regexp(t, byToken, d.Timeline[0].Actor, key)
	}
	d, err := b.acme.Get(ctx, "order:2")
	require.NoError(t, err)
	require.Equal(t, "w1", d.Attempts[0].Worker, "the attempt keeps the worker's own name")
}
