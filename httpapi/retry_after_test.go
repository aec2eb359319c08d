package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
)

// TestLongRetryAfterReported: a retryable outcome whose destination asks
// for a wait longer than a week (a quota that resets next month) is
// recorded, its wait bounded as the executor bounds a Retry-After (366
// days), and the retry policy decides what follows. It was refused with
// 400, so the report of a call that had no effect was lost and the
// dispatched attempt became uncertain when its lease ran out.
func TestLongRetryAfterReported(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	for i, tc := range []struct {
		seconds string
		wait    time.Duration
	}{
		{"864000", 10 * 24 * time.Hour},      // ten days, as the destination said
		{"1e12", 366 * 24 * time.Hour},       // absurd: bounded
		{"31622400.5", 366 * 24 * time.Hour}, // just past the bound
	} {
		key := fmt.Sprintf("quota:%d", i)
		c, err := b.acme.Claim(ctx, key, client.ClaimRequest{Worker: "w", Dispatch: true,
			Intent: &client.Intent{Action: "crm.create", Destination: "crm"}})
		require.NoError(t, err)
		status, data := b.raw(t, "POST", "/v1/operations/"+key+"/attempts/"+c.AttemptID+"/outcome", b.token,
			[]byte(fmt.Sprintf(`{"fencing_token":%d,"outcome":"retryable","error":"429 quota exceeded","retry_after_seconds":%s}`, c.FencingToken, tc.seconds)))
		require.Equal(t, http.StatusOK, status, "%s: %s", tc.seconds, data)
		op, err := b.acme.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, "no effect: due again after the wait, never uncertain")
		require.NotNil(t, op.NotBefore)
		require.WithinDuration(t, op.UpdatedAt.Add(tc.wait), *op.NotBefore, time.Second, tc.seconds)
		require.Equal(t, string(opledger.OutcomeRetryable), op.Attempts[0].Outcome)
	}
	// A negative wait is still refused.
	c, err := b.acme.Claim(ctx, "quota:neg", client.ClaimRequest{Worker: "w", Dispatch: true,
		Intent: &client.Intent{Action: "crm.create", Destination: "crm"}})
	require.NoError(t, err)
	status, data := b.raw(t, "POST", "/v1/operations/quota:neg/attempts/"+c.AttemptID+"/outcome", b.token,
		[]byte(fmt.Sprintf(`{"fencing_token":%d,"outcome":"retryable","retry_after_seconds":-1}`, c.FencingToken)))
	require.Equal(t, http.StatusBadRequest, status, "%s", data)
	require.Equal(t, "invalid_input", problemKind(t, data))
}
