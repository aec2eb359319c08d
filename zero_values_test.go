package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// What an empty name or reason does is what the doc comments say: a
// token created without a name is named "token", and a hold without a
// reason (or with spaces only) is refused with ErrReasonRequired before
// the operation is read, whatever its state.
func TestEmptyNameAndReasonAsDocumented(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openSQLiteLedger(t)

	_, info, err := l.CreateToken(ctx, "", opledger.ReadOnly)
	require.NoError(t, err)
	require.Equal(t, "token", info.Name)
	require.Equal(t, "token token, "+info.ID, info.Credential())

	_, _, err = l.Record(ctx, opledger.Intent{Key: "mail:u1", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	for _, reason := range []string{"", "   "} {
		_, err = l.Hold(ctx, "mail:u1", reason)
		require.ErrorIs(t, err, opledger.ErrReasonRequired)
	}
	_, err = l.Hold(ctx, "mail:u1", "lookups keep failing")
	require.ErrorIs(t, err, opledger.ErrInvalidState, "a pending operation is not held")
	var se *opledger.StateError
	require.ErrorAs(t, err, &se)
}
