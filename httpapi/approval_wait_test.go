package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
)

// TestApprovalWaitFigures: GET /v1/stats says how long the operation
// awaiting approval the longest has waited (oldest_approval_wait_seconds)
// and /metrics serves the same figure across tenants
// (opledger_oldest_approval_wait_seconds); both are 0 once it is approved.
func TestApprovalWaitFigures(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			op, _, err := b.acme.Record(ctx, "refund:1", client.Intent{Action: "payments.refund", Destination: "payments",
				Payload: json.RawMessage(`{"cents":4900}`), RequiresApproval: true})
			require.NoError(t, err)
			b.clock.advance(time.Hour)

			// The store's clock moves too while the test runs: the wait is an
			// hour and the little that passed in between.
			hour := func(seconds float64, what string) {
				t.Helper()
				require.GreaterOrEqual(t, seconds, 3600.0, what)
				require.Less(t, seconds, 3660.0, what)
			}
			status, body := b.raw(t, "GET", "/v1/stats", b.token, nil)
			require.Equal(t, http.StatusOK, status, string(body))
			var stats struct {
				Wait *float64 `json:"oldest_approval_wait_seconds"`
			}
			require.NoError(t, json.Unmarshal(body, &stats))
			require.NotNil(t, stats.Wait, "the field is there: %s", body)
			hour(*stats.Wait, "/v1/stats")
			other, err := b.other.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, other.OldestApprovalWaitSeconds, "another tenant's approval is not this tenant's")

			metric := regexp.MustCompile(`(?m)^opledger_oldest_approval_wait_seconds (\S+)$`)
			status, body = b.raw(t, "GET", "/metrics", "", nil)
			require.Equal(t, http.StatusOK, status)
			m := metric.FindSubmatch(body)
			require.NotNil(t, m, "the gauge is served")
			v, err := strconv.ParseFloat(string(m[1]), 64)
			require.NoError(t, err)
			hour(v, "/metrics")

			_, _, err = b.acme.Approve(ctx, op.Key, opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "ana"})
			require.NoError(t, err)
			after, err := b.acme.Stats(ctx)
			require.NoError(t, err)
			require.Zero(t, after.OldestApprovalWaitSeconds, "approved: nothing waits")
		})
	}
}

// TestApproveSeenUpdatedAt: an approval naming the operation as it was
// seen (seen_updated_at) is refused 409 stale_decision once the
// operation has been cancelled and given a retry, though it awaits
// approval of the same content again; seen as it is now, it is taken.
func TestApproveSeenUpdatedAt(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	seen, _, err := b.acme.Record(ctx, "refund:1", client.Intent{Action: "payments.refund", Destination: "payments",
		Payload: json.RawMessage(`{"cents":4900}`), RequiresApproval: true})
	require.NoError(t, err)
	b.clock.advance(time.Second)
	_, _, err = b.acme.Resolve(ctx, "refund:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not now", Operator: "ana"})
	require.NoError(t, err)
	b.clock.advance(time.Second)
	again, _, err := b.acme.Resolve(ctx, "refund:1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "now", Operator: "ana"})
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, again.State)

	approval := opledger.Approval{Version: seen.Version, Fingerprint: seen.Fingerprint, Approver: "ben", SeenUpdatedAt: seen.UpdatedAt}
	_, _, err = b.acme.Approve(ctx, "refund:1", approval)
	require.ErrorIs(t, err, opledger.ErrStaleDecision)
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, http.StatusConflict, ce.Status)
	require.Equal(t, "stale_decision", ce.Kind())

	approval.SeenUpdatedAt = again.UpdatedAt
	op, _, err := b.acme.Approve(ctx, "refund:1", approval)
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
}
