package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// A decision without a reason is refused by the API as reason_required
// (unchanged), and the client's error matches what the library's does:
// opledger.ErrReasonRequired and opledger.ErrInvalidInput.
func TestReasonRequiredMatchesAsInTheLibrary(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	const key = "order:R1:create"
	_, _, err := c.Record(ctx, key, client.Intent{Action: "crm.create", Destination: "crm"})
	require.NoError(t, err)
	_, _, err = c.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Operator: "Maria"})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "reason_required", e.Kind(), "the API's answer is unchanged")
	require.Equal(t, 400, e.Status)
	require.ErrorIs(t, err, opledger.ErrReasonRequired)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}
