package opledger_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestNilOperationMethods: OperationOf returns nil for an error that
// carries no operation, and a program chains on what it returns
// (opledger.OperationOf(err).Masked() to log it). The methods of
// *Operation answer a nil one with nil or the zero value, rather than
// panicking in the middle of handling an error: an operation that is not
// there has no sensitive values to mask and no idempotency key.
func TestNilOperationMethods(t *testing.T) {
	t.Parallel()
	op := opledger.OperationOf(errors.New("the store is down"))
	require.Nil(t, op)
	require.NotPanics(t, func() {
		require.Nil(t, op.Masked())
		require.Nil(t, op.ForClaimant())
		require.Equal(t, "", op.IdempotencyKey())
		require.Equal(t, "text about nothing", op.MaskText("text about nothing"))
		attempts := []*opledger.Attempt{{ID: "a1", DestinationRef: "R1"}}
		require.Equal(t, attempts, op.MaskedAttempts(attempts))
		b, err := json.Marshal(op)
		require.NoError(t, err)
		require.Equal(t, "null", string(b))
		require.Equal(t, "null", string(must(json.Marshal(op.Masked()))))
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
