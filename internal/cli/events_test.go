package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestEventsShowJSON: events show --json prints the document
// GET /v1/events/{source}/{event_id} gives, from the store and through a
// server, with the operations' sensitive fields masked as the API does.
func TestEventsShowJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, l, rules, ev := intakeLedger(t, opledger.Options{})
	_, err := l.ReceiveEvent(ctx, rules, ev)
	require.NoError(t, err)
	ev.DeliveryID = "d2"
	_, err = l.ReceiveEvent(ctx, rules, ev)
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadWrite)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	url, _ := startServe(t, dsn)
	req, err := http.NewRequest(http.MethodGet, url+"/v1/events/forms/evt-1", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	api, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(api))
	require.Contains(t, string(api), "intake:S1:mail")
	require.NotContains(t, string(api), "ana@example.invalid")

	for _, args := range [][]string{
		{"--db", dsn, "--tenant", "acme"},
		{"--server", url, "--token", token},
	} {
		out, errOut, code := run(t, append([]string{"events", "show", "forms", "evt-1", "--json"}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Empty(t, errOut, args)
		require.JSONEq(t, string(api), out, "%v: as the API gives it", args)
	}
}

// intakeLedger opens a new SQLite ledger of tenant acme, whose rule
// intake maps a forms submission.accepted event to a mail operation with
// the address sensitive, and returns it with its DSN, the rules and such
// an event (evt-1, first delivery d1), not yet received.
func intakeLedger(t *testing.T, opts opledger.Options) (string, *opledger.Ledger, *opledger.Rules, opledger.Event) {
	t.Helper()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ev.db")
	opts.Tenant = "acme"
	l, err := opledger.Open(context.Background(), dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: intake
    source: forms
    type: submission.accepted
    operations:
      - key: "intake:{data.id}:mail"
        action: mail.send
        destination: mail
        payload: {to: "{data.email}", id: "{data.id}"}
        sensitive_fields: [to]
`))
	require.NoError(t, err)
	ev := opledger.Event{Source: "forms", EventID: "evt-1", DeliveryID: "d1", Type: "submission.accepted",
		Payload: json.RawMessage(`{"id":"S1","email":"ana@example.invalid"}`)}
	return dsn, l, rules, ev
}
