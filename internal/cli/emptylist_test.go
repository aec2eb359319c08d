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

// TestEmptyListSaysSo: a list whose filters match nothing in a tenant
// that has some of the kind printed its header alone, which reads like a
// command that printed nothing yet, or failed; workflows list, ops list
// and events list now say, on stderr (stdout stays the table), that none
// matches the filters given, and name them. A tenant with none at all
// still gets its note alone; --json prints no line on stdout either way.
func TestEmptyListSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "empty.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "onb:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	_, err = l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: "e1", Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	for _, tc := range []struct {
		args []string
		line string
	}{
		{[]string{"workflows", "list", "--prefix", "pay:"}, "no workflows match the filters given (--prefix)"},
		{[]string{"workflows", "list", "--stuck"}, "no workflows match the filters given (--stuck)"},
		{[]string{"workflows", "list", "--open", "--prefix", "x"}, "no workflows match the filters given (--prefix, --open)"},
		{[]string{"ops", "list", "--state", "held,uncertain"}, "no operations match the filters given (--state)"},
		{[]string{"ops", "list", "--owner", "ana", "--destination", "crm"}, "no operations match the filters given (--owner, --destination)"},
		{[]string{"events", "list", "--status", "conflict"}, "no events match the filters given (--status)"},
	} {
		for _, asJSON := range []bool{false, true} {
			args := append(append([]string{}, tc.args...), "--db", dsn)
			if asJSON {
				args = append(args, "--json")
			}
			out, errOut, code := run(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			require.Equal(t, tc.line+"\n", errOut, args)
			if asJSON {
				require.Empty(t, out, args)
			} else {
				require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, "the header alone: %v", args)
			}
		}
	}
	// A tenant with none at all: its note, alone.
	_, errOut, code := run(t, "workflows", "list", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "note: tenant \"acme\" lists no workflow at all: if you meant another tenant, --tenant names it\n", errOut)
	// A list that has items says nothing of the kind.
	_, errOut, code = run(t, "workflows", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)
}

// TestEmptyTokensListSaysSo: tokens list of a ledger (or a tenant) with
// no token printed its header alone; it says on stderr that there is
// none and how to create one, and prints nothing else on stdout.
func TestEmptyTokensListSaysSo(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "tokens.db")
	_, errOut, code := run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	for _, tc := range []struct {
		args []string
		line string
	}{
		{nil, "no tokens: create one with opledger tokens create --tenant NAME --name NAME"},
		{[]string{"--tenant", "acme"}, "tenant \"acme\" has no tokens: create one with opledger tokens create --tenant acme --name NAME"},
	} {
		for _, asJSON := range []bool{false, true} {
			args := append([]string{"tokens", "list", "--db", dsn}, tc.args...)
			if asJSON {
				args = append(args, "--json")
			}
			out, errOut, code := run(t, args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			require.Equal(t, tc.line+"\n", errOut, args)
			if asJSON {
				require.Empty(t, out, args)
			} else {
				require.Equal(t, 1, strings.Count(out, "\n"), "the header alone: %v", args)
			}
		}
	}
	// A ledger with a token says nothing of the kind.
	_, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "acme", "--name", "n8n")
	require.Equal(t, 0, code, errOut)
	out, errOut, code := run(t, "tokens", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)
	require.Contains(t, out, "n8n")
}
