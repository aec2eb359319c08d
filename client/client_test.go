package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// serve starts the HTTP API on a ledger in a fresh SQLite file and
// returns a client with a token of it.
func serve(t *testing.T) *client.Client {
	t.Helper()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	secret, _, err := l.CreateToken(ctx, "test")
	require.NoError(t, err)
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return client.New(srv.URL, secret, nil)
}

// succeed records, claims and reports an operation as succeeded; its
// payload has a sensitive field.
func succeed(t *testing.T, c *client.Client, key string) *client.ReportResult {
	t.Helper()
	ctx := context.Background()
	cl, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
		Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Ada","email":"ada@example.com"}`),
		SensitiveFields: []string{"email"}}})
	require.NoError(t, err)
	res, err := c.Report(ctx, key, cl.AttemptID, client.Report{FencingToken: cl.FencingToken, Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "R1", Response: json.RawMessage(`{"id":"R1","email":"ada@example.com"}`)})
	require.NoError(t, err)
	return res
}

// OperationDetail and ReportResult encode their own fields along with the
// operation's, which stays masked: the embedded Operation's MarshalJSON
// does not take their place.
func TestDetailAndReportResultMarshal(t *testing.T) {
	t.Parallel()
	c := serve(t)
	res := succeed(t, c, "order:1:create")
	d, err := c.Get(context.Background(), "order:1:create")
	require.NoError(t, err)
	require.Len(t, d.Attempts, 1)
	require.NotEmpty(t, d.Timeline)

	for name, v := range map[string]any{"detail": d, "detail value": *d, "report result": res} {
		b, err := json.Marshal(v)
		require.NoError(t, err, name)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &m), name)
		require.JSONEq(t, `"order:1:create"`, string(m["key"]), name)
		require.JSONEq(t, `"succeeded"`, string(m["state"]), name)
		require.NotContains(t, string(b), "ada@example.com", "%s: the sensitive field stays masked", name)
		require.Contains(t, string(m["payload"]), "Ada", name)
		if name == "report result" {
			require.JSONEq(t, `false`, string(m["stale_report"]), name)
			continue
		}
		var attempts []opledger.Attempt
		require.NoError(t, json.Unmarshal(m["attempts"], &attempts), name)
		require.Len(t, attempts, 1, name)
		require.Equal(t, d.Attempts[0].ID, attempts[0].ID)
		var timeline []opledger.TimelineEntry
		require.NoError(t, json.Unmarshal(m["timeline"], &timeline), name)
		require.Len(t, timeline, len(d.Timeline), name)
	}

	b, err := json.Marshal(client.ReportResult{Operation: res.Operation, StaleReport: true})
	require.NoError(t, err)
	var back client.ReportResult
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.StaleReport)
	require.Equal(t, res.Operation.Key, back.Key)
}

// A refusal for an operation that already succeeded matches
// opledger.ErrAlreadySucceeded, as the library's *StateError does.
func TestErrorIsAlreadySucceeded(t *testing.T) {
	t.Parallel()
	c := serve(t)
	succeed(t, c, "order:2:create")
	_, err := c.Revise(context.Background(), "order:2:create", opledger.Revision{Payload: json.RawMessage(`{"name":"Bob"}`), Version: 2})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "invalid_state", e.Kind(), "%v", err)
	require.Equal(t, opledger.StateSucceeded, e.Problem.State)
	require.ErrorIs(t, err, opledger.ErrAlreadySucceeded)
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	require.False(t, errors.Is(err, opledger.ErrInProgress))

	// The same problem for another state does not match.
	other := &client.Error{Status: 409, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + "invalid_state", State: opledger.StateHeld}}
	require.False(t, errors.Is(other, opledger.ErrAlreadySucceeded))
	require.True(t, errors.Is(other, opledger.ErrInvalidState))
	inProgress := &client.Error{Status: 409, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + "invalid_state", State: opledger.StateInProgress}}
	require.True(t, errors.Is(inProgress, opledger.ErrInProgress))
	// The library agrees.
	require.ErrorIs(t, &opledger.StateError{State: opledger.StateSucceeded}, opledger.ErrAlreadySucceeded)

	// Input the server refuses matches ErrInvalidInput, whatever refused it.
	for _, kind := range []string{"invalid_input", "invalid_json", "mapping_failed", "payload_too_large"} {
		e := &client.Error{Status: 400, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + kind}}
		require.ErrorIs(t, e, opledger.ErrInvalidInput, kind)
		require.False(t, errors.Is(e, opledger.ErrInvalidState), kind)
	}
}
