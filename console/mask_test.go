package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A destination reference that holds a sensitive value is shown masked
// on the operation page (the operation and its attempts) and on its
// workflow's page.
func TestSensitiveRefMaskedOnPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	srv := httptest.NewServer(c)
	defer srv.Close()

	_, _, err := l.PutWorkflow(ctx, "wf:W-1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "send", Action: "mail.send", Destination: "mail", SensitiveFields: []string{"to"},
			Payload: json.RawMessage(`{"to":"ana@example.invalid"}`)}}})
	require.NoError(t, err)
	const key = "wf:W-1/send"
	cl, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	_, err = l.Report(ctx, key, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "m1.ana@example.invalid", Response: json.RawMessage(`{"note":"sent to ana@example.invalid"}`)})
	require.NoError(t, err)

	s := signIn(t, srv.URL, token)
	for _, path := range []string{"/operations/" + url.PathEscape(key), "/workflows/" + url.PathEscape("wf:W-1")} {
		page := s.get(path)
		require.NotContains(t, page, "ana@", path)
		require.Contains(t, page, "m1.***", path)
	}
	op, err := l.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "m1.ana@example.invalid", op.DestinationRef, "stored as reported")
}
