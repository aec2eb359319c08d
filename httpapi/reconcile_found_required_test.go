package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestAuthoritativeWithoutFoundRefused: found may be left out of a
// finding that only applies a protection, but "authoritative" is about a
// lookup's answer. With a protection beside it, a finding that never said
// whether anything was found passed as an authoritative "found nothing":
// absence proven, the protection dropped, the operation released for a
// plain resend. It is refused now, as "authoritative" alone is.
func TestAuthoritativeWithoutFoundRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	const key = "order:1:create"
	in := opledger.Intent{Key: key, Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)}
	c, err := b.ledger.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)

	status, data := b.raw(t, "POST", "/v1/operations/"+key+"/reconcile", b.token,
		[]byte(`{"authoritative":true,"protection_retention_seconds":3600,"evidence":"idempotency key"}`))
	require.Equal(t, http.StatusBadRequest, status, string(data))
	require.Equal(t, "invalid_input", problemKind(t, data))
	require.Contains(t, problemDetail(t, data), "authoritative is a lookup's: send found")
	op, err := b.ledger.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State, "nothing decided")

	// The protection alone is applied.
	status, data = b.raw(t, "POST", "/v1/operations/"+key+"/reconcile", b.token,
		[]byte(`{"protection_retention_seconds":3600,"evidence":"idempotency key"}`))
	require.Equal(t, http.StatusOK, status, string(data))
	op, err = b.ledger.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.True(t, op.Protected)
}
