package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestStoreBusyProblem: a request that meets another process's lock held
// past the ledger's wait (SQLite's busy timeout; PostgreSQL's lock_timeout,
// set in the DSN) answers 503 store_busy with Retry-After, not a 500
// internal error: nothing was recorded, and the same request succeeds once
// the lock is gone. The server log says why, at warning level.
func TestStoreBusyProblem(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			if st.Name == "postgres" {
				dsn += "&lock_timeout=100ms"
			}
			l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 100 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
			require.NoError(t, err)
			var log bytes.Buffer
			h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			require.NoError(t, err)
			do := func(method, path, body string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(method, path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			_, _, err = l.Record(ctx, opledger.Intent{Key: "busy:1", Action: "crm.create", Destination: "crm",
				Payload: json.RawMessage(`{"n":1}`)})
			require.NoError(t, err)

			release := testdb.HoldLock(t, dsn, "default", "busy:1")
			rec := do("POST", "/v1/operations/busy:1/claim", `{}`)
			release()
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			require.Equal(t, "1", rec.Header().Get("Retry-After"))
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			var p httpapi.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			require.Equal(t, httpapi.ProblemTypeBase+"store_busy", p.Type)
			require.Equal(t, http.StatusServiceUnavailable, p.Status)
			require.NotEmpty(t, p.Title)
			// The detail says what happened, not the driver's words for it
			// (SQLITE_BUSY, SQLSTATE 55P03, the statement it stopped at):
			// those are the server log's, under the request id.
			require.Equal(t, opledger.ErrStoreBusy.Error(), p.Detail)
			require.Contains(t, log.String(), "level=WARN")
			require.Contains(t, log.String(), "problem=store_busy")
			require.Contains(t, log.String(), map[string]string{"sqlite": "SQLITE_BUSY", "postgres": "55P03"}[st.Name], "the log keeps the cause")

			op, err := l.Get(ctx, "busy:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State, "nothing was recorded")
			require.Zero(t, op.AttemptCount)
			rec = do("POST", "/v1/operations/busy:1/claim", `{}`)
			require.Equal(t, http.StatusCreated, rec.Code, "tried again once the lock is gone: %s", rec.Body.String())
		})
	}
}
