package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestOpsShowDeduplicationSupport: the replay decision record's
// "deduplication support" says only what the command knows. Neither
// the store nor the API carries what a destination declares, so of an
// operation whose next attempt is not a protected retry the record on
// the store points at the destination's configuration, and through a
// server (whose configuration the command never sees) it leaves the
// line out, in text and in --json. A protected retry, which the
// operation itself records, is shown alike either way.
func TestOpsShowDeduplicationSupport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "dedup.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	plain, _, err := l.Record(ctx, opledger.Intent{Key: "order:1", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "pay:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "pay:1", Action: "charge", Destination: "payment"}})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "pay:1", c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, "pay:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	protected, _, err := l.Reconcile(ctx, "pay:1", opledger.Finding{ProtectionRetention: 24 * time.Hour, Evidence: "key kept 24h"})
	require.NoError(t, err)
	require.True(t, protected.Protected)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	url, _ := startServe(t, dsn)
	db := []string{"--db", dsn}
	server := []string{"--server", url, "--token", token}
	protectedLine := "  deduplication support:  idempotency key " + protected.IdempotencyKey() + " (next attempt is a protected retry)\n"
	for _, tc := range []struct {
		key   string
		where []string
		line  string // "" when there is none
	}{
		{"order:1", db, "  deduplication support:  as declared by destination crm (see its configuration); key " + plain.IdempotencyKey() + "\n"},
		{"order:1", server, ""},
		{"pay:1", db, protectedLine},
		{"pay:1", server, protectedLine},
	} {
		args := append([]string{"ops", "show", tc.key}, tc.where...)
		out, errOut, code := run(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Contains(t, out, "  result:", args)
		if tc.line == "" {
			require.NotContains(t, out, "deduplication support", args)
		} else {
			require.Contains(t, out, tc.line, args)
		}

		out, errOut, code = run(t, append(args, "--json")...)
		require.Equal(t, 0, code, "%v --json: %s", args, errOut)
		var doc struct {
			Decision map[string]string `json:"replay_decision"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
		require.NotEmpty(t, doc.Decision["result"], args)
		support, ok := doc.Decision["deduplication_support"]
		if tc.line == "" {
			require.False(t, ok, "%v --json: %q", args, support)
		} else {
			require.Equal(t, tc.line[len("  deduplication support:  "):len(tc.line)-1], support, args)
		}
	}
}
