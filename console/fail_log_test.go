package console_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestFailureLogsNoKey: a page that fails inside the ledger (here a
// workflow whose stored definition was damaged) logs the cause with the
// key of the page's path left out, as the API does: keys may carry
// personal data and stay out of logs.
func TestFailureLogsNoKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	const key = "intake:alice.smith"
	_, _, err = l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(dsn, "sqlite:")+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE workflows SET definition = 'not json'`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	logs := &testrig.LogBuffer{}
	c, err := console.New(l, console.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	srv := httptest.NewServer(c)
	defer srv.Close()

	s := signIn(t, srv.URL, token)
	status, _ := s.fetch("/workflows/" + key)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, logs.String(), "decode workflow <key>: invalid character")
	require.NotContains(t, logs.String(), "alice")

	// A list names no key in its path: the ledger's error leaves the
	// row's out itself.
	before := len(logs.String())
	status, _ = s.fetch("/workflows")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, logs.String()[before:], "decode workflow <key>: invalid character")
	require.NotContains(t, logs.String(), "alice")
}
