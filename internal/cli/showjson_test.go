package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOpsShowJSONEmptyLists: ops show --json gives an operation's
// attempts and timeline as arrays, [] when there are none (an operation
// not claimed yet has no attempt, a compacted one neither attempt nor
// timeline), from the store as through a server, as GET
// /v1/operations/{key} does: never null, which a script iterating over
// them (jq '.attempts[]') cannot take.
func TestOpsShowJSONEmptyLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "show.db")
	var offset atomic.Int64
	l, err := opledger.Open(ctx, dsn, opledger.Options{Retention: time.Hour,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "order:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"}})
	require.NoError(t, err)
	_, err = l.Report(ctx, "order:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "CRM-1"})
	require.NoError(t, err)
	offset.Store(int64(2 * time.Hour))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:2", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	url, _ := startServe(t, dsn)
	for _, tc := range []struct {
		key   string
		empty []string
	}{
		{"order:1", []string{"attempts", "timeline"}},
		{"order:2", []string{"attempts"}},
	} {
		for _, where := range [][]string{{"--db", dsn}, {"--server", url, "--token", token}} {
			args := append([]string{"ops", "show", tc.key, "--json"}, where...)
			out, errOut, code := run(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			var doc map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
			for _, field := range tc.empty {
				require.JSONEq(t, `[]`, string(doc[field]), "%v: %s", args, field)
			}
		}
	}
}

// TestOpsStatsEmptyTenantNote: ops stats of a tenant that has no
// operation and no event at all says so on stderr, as an empty ops list
// does: all its figures 0 would read as a quiet ledger, when --tenant
// (default "default") or the token names the wrong tenant. A tenant with
// an operation, and --all-tenants, get no note; stdout is the figures
// alone.
func TestOpsStatsEmptyTenantNote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "stats.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	beta, err := l.WithTenant("beta")
	require.NoError(t, err)
	betaToken, _, err := beta.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	url, _ := startServe(t, dsn)

	for _, tc := range []struct {
		args []string
		note string
	}{
		{[]string{"--db", dsn}, `note: tenant "default" lists no operation or event at all (its figures are all 0): if you meant another tenant, --tenant names it` + "\n"},
		{[]string{"--db", dsn, "--json"}, `note: tenant "default" lists no operation or event at all (its figures are all 0): if you meant another tenant, --tenant names it` + "\n"},
		{[]string{"--server", url, "--token", betaToken}, "note: the token's tenant lists no operation or event at all (its figures are all 0): a token of another tenant lists that tenant's\n"},
		{[]string{"--db", dsn, "--tenant", "acme"}, ""},
		{[]string{"--db", dsn, "--all-tenants"}, ""},
	} {
		args := append([]string{"ops", "stats"}, tc.args...)
		out, errOut, code := run(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Equal(t, tc.note, errOut, args)
		require.NotContains(t, out, "note:", args)
	}
}
