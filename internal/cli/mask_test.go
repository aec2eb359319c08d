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

// A destination reference that holds a sensitive value, and a response
// that quotes one, are shown masked by ops list and ops show, in their
// tables, reason lines and --json alike.
func TestOpsMaskSensitiveRefsAndResponses(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	ctx := context.Background()
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, err = l.Do(ctx, opledger.Intent{Key: "k1", Action: "send", Destination: "mail",
		Payload: json.RawMessage(`{"to":"ana@example.invalid"}`), SensitiveFields: []string{"to"}},
		func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{Ref: "<m1.ana@example.invalid>", Response: json.RawMessage(`{"note":"sent to ana@example.invalid"}`)}, nil
		})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	for _, args := range [][]string{{"ops", "list"}, {"ops", "list", "--json"}, {"ops", "show", "k1"}, {"ops", "show", "k1", "--json"}} {
		out, errOut, code := run(t, append(args, "--db", dsn)...)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "ana@", args)
		require.Contains(t, out, "m1.***", args)
	}
	out, _, code := run(t, "ops", "show", "k1", "--db", dsn)
	require.Equal(t, 0, code)
	require.Contains(t, out, "repeats replay reference <m1.***>")
	require.Contains(t, out, "destination reference:  <m1.***>")
	require.Equal(t, 4, strings.Count(out, "<m1.***>"), "the attempt, the timeline, the record and its reason:\n%s", out)
}

// events show prints the operations an event produced in the table ops
// list prints, masked as ops list masks them: a destination reference
// made of a sensitive value is shown masked from the store as through a
// server, in the text as in --json.
func TestEventsShowMasksSensitiveRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, l, rules, ev := intakeLedger(t, opledger.Options{})
	_, err := l.ReceiveEvent(ctx, rules, ev)
	require.NoError(t, err)
	c, err := l.Claim(ctx, "intake:S1:mail", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "intake:S1:mail", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "<m1.ana@example.invalid>"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	url, _ := startServe(t, dsn)
	for _, where := range [][]string{{"--db", dsn, "--tenant", "acme"}, {"--server", url, "--token", token}} {
		for _, format := range [][]string{nil, {"--json"}} {
			args := append(append([]string{"events", "show", "forms", "evt-1"}, where...), format...)
			out, errOut, code := run(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			require.Contains(t, out, "intake:S1:mail", args)
			require.NotContains(t, out, "ana@", args)
			require.Contains(t, out, "m1.***", args)
		}
	}
}
