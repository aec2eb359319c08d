package httpapi_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestApprovalWaitNotRestartedByOtherWrites: oldest_approval_wait_seconds
// counts from when the operation began to await approval (its
// state_since), not from its last change: a repeat that names the owner
// it lacked changes the operation but not the wait, as the OpenAPI
// document now says.
func TestApprovalWaitNotRestartedByOtherWrites(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := &frozenClock{start: time.Now().UTC().Truncate(time.Second)}
			s := startFigures(t, st.NewDSN(t), clock)
			l, err := s.ledger.WithTenant("acme")
			require.NoError(t, err)
			tok, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
			require.NoError(t, err)
			c := client.New(s.url, tok, nil)
			in := client.Intent{Action: "payments.refund", Destination: "payments", Payload: json.RawMessage(`{"cents":4900}`), RequiresApproval: true}
			op, _, err := c.Record(ctx, "refund:1", in)
			require.NoError(t, err)
			clock.advance(time.Hour)
			in.Owner = "finance"
			named, created, err := c.Record(ctx, "refund:1", in)
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, "finance", named.Owner)
			require.True(t, named.UpdatedAt.After(op.UpdatedAt), "the repeat changed the operation")
			clock.advance(time.Hour)
			stats, err := c.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, 7200.0, stats.OldestApprovalWaitSeconds, "waiting since its recording, not since its last change")
			require.Contains(t, openAPIApprovalWait(t), "since it began to wait")
		})
	}
}

// openAPIApprovalWait is the OpenAPI document's description of
// oldest_approval_wait_seconds.
func openAPIApprovalWait(t *testing.T) string {
	t.Helper()
	return openAPIStatsProperties(t)["oldest_approval_wait_seconds"]
}

// TestOpenAPIRecoveryFigures: the OpenAPI document says what each
// recovery figure of GET /v1/stats measures, and gives the upper bounds
// of recovery_buckets (opledger.RecoveryBuckets), without which its
// counts cannot be read.
func TestOpenAPIRecoveryFigures(t *testing.T) {
	t.Parallel()
	props := openAPIStatsProperties(t)
	var bounds []string
	for _, b := range opledger.RecoveryBuckets {
		bounds = append(bounds, strconv.FormatFloat(b.Seconds(), 'f', -1, 64))
	}
	require.Contains(t, props["recovery_buckets"], strings.Join(bounds, ", ")+" seconds")
	for _, name := range []string{"recoveries", "recovery_mean_seconds", "recovery_p90_seconds", "recovery_total_seconds"} {
		require.Contains(t, props[name], "uncertain or held", name)
	}
}

// openAPIStatsProperties are the descriptions of the OpenAPI document's
// Stats properties, by name.
func openAPIStatsProperties(t *testing.T) map[string]string {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	out := map[string]string{}
	for name, p := range doc.Components.Schemas["Stats"].Properties {
		out[name] = p.Description
	}
	return out
}
