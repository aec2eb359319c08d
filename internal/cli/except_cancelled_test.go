package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOpsListExceptCancelled: 'ops list --except-cancelled' leaves out the
// failed operations an operator cancelled, as the console's exception
// queue does, from the store and through a server alike.
func TestOpsListExceptCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ops.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	for _, key := range []string{"x:rejected", "x:cancelled"} {
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	c, err := l.Claim(ctx, "x:rejected", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "x:rejected", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "invalid"})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "x:cancelled", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	keys := func(args ...string) []string {
		t.Helper()
		out, errOut, code := run(t, append([]string{"ops", "list", "--state", "failed", "--json"}, args...)...)
		require.Equal(t, 0, code, errOut)
		var ks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var op opledger.Operation
			require.NoError(t, json.Unmarshal([]byte(line), &op), line)
			ks = append(ks, op.Key)
		}
		return ks
	}
	require.ElementsMatch(t, []string{"x:rejected", "x:cancelled"}, keys("--db", dsn))
	require.Equal(t, []string{"x:rejected"}, keys("--db", dsn, "--except-cancelled"))
	url, _ := startServe(t, dsn)
	require.Equal(t, []string{"x:rejected"}, keys("--server", url, "--token", token, "--except-cancelled"))
}
