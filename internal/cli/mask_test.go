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
