package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// TestReportFromMasksBeforeTheCut: a remote worker reports an outcome
// built by opledger.ReportOf through the HTTP API. The API carries the
// error text as ReportOf cut it (to the 1,000 bytes the ledger keeps,
// its notes kept, and a reference the ledger cannot store quoted in its
// first 64 bytes); a sensitive value across either cut would reach the
// server in part, where it can no longer be recognised. ReportFrom masks
// the values of the claimed operation's sensitive fields before the cut,
// as the ledger does for a report made in the same process.
func TestReportFromMasksBeforeTheCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	c := b.client
	const secret = "ana.maria.silva@example.invalid"
	refPrefix := "https://crm.example/contacts/" + strings.Repeat("c", 20) + "?to=" // the value starts at byte 53
	for i, tc := range []struct {
		name string
		res  opledger.Result
		err  error
		want string
	}{
		{"error across the cut", opledger.Result{}, opledger.Uncertain(errors.New(strings.Repeat("x", 990) + " to " + secret)), "to ***"},
		{"error across the cut before a note", opledger.Result{Ref: "R-1"},
			opledger.Retryable(errors.New(strings.Repeat("x", 860)+" to "+secret+" was refused"), 0), "to ***"},
		{"reference quote across its cut", opledger.Result{Ref: refPrefix + secret + "&" + strings.Repeat("y", 200)}, nil, "?to=***"},
	} {
		key := "mask:" + string(rune('a'+i))
		claim, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
			Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"to":"` + secret + `"}`),
			SensitiveFields: []string{"to"}}})
		require.NoError(t, err, tc.name)
		r := opledger.ReportOf(tc.res, tc.err)
		body := client.ReportFrom(claim, r)
		require.NotContains(t, body.Error, "ana.m", "%s: nothing of the value is sent", tc.name)
		require.LessOrEqual(t, len(body.Error), 1000, tc.name)
		res, err := c.Report(ctx, key, claim.AttemptID, body)
		require.NoError(t, err, tc.name)
		require.Equal(t, opledger.StateUncertain, res.State, tc.name)
		attempts, err := b.ledger.Attempts(ctx, key)
		require.NoError(t, err)
		op, err := b.ledger.Get(ctx, key)
		require.NoError(t, err)
		for _, text := range []string{op.LastError, attempts[0].Error} {
			require.NotContains(t, text, "ana.m", "%s: no part of the value is stored", tc.name)
			require.Contains(t, text, tc.want, tc.name)
		}
		if tc.name == "error across the cut before a note" {
			require.True(t, strings.HasSuffix(op.LastError, "so it may have acted"), "%s: the note is kept: %q", tc.name, op.LastError)
		}
	}
}
