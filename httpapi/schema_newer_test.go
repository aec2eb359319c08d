package httpapi_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/webhook"
)

// TestNewerSchemaStopsTheServer: once a newer release has migrated the
// store under a running server (a rolling upgrade), the server records
// nothing more: a write answers 503 schema_newer, saying why, and
// /readyz answers the same, so that a load balancer sends the requests
// to the newer release's servers.
func TestNewerSchemaStopsTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	opts := apiOptions(t)
	opts.Auth, opts.Logger = l, slog.New(slog.DiscardHandler)
	h, err := httpapi.New(l, opts)
	require.NoError(t, err)
	var header http.Header // more headers of the next request
	do := func(method, path, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, err := io.ReadAll(rec.Result().Body)
		require.NoError(t, err)
		return rec.Code, string(b)
	}
	put := `{"action":"crm.create","destination":"crm","payload":{"n":1}}`
	code, body := do(http.MethodPut, "/v1/operations/k-1", put)
	require.Equal(t, http.StatusCreated, code, body)

	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	newest := versions[len(versions)-1]
	path, _ := sqlitestore.DSNPath(dsn)
	// A busy timeout: the token's use is written beside the first
	// request, and may still hold the write lock.
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path)+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future.sql', 0)`, newest+1)
	require.NoError(t, err)

	want := fmt.Sprintf("the store's schema is at version %d, newer than this opledger knows (%d)", newest+1, newest)
	code, body = do(http.MethodPut, "/v1/operations/k-2", put)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"type":"`+httpapi.ProblemTypeBase+`schema_newer"`)
	require.Contains(t, body, want)
	code, body = do(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"type":"`+httpapi.ProblemTypeBase+`schema_newer"`)
	require.Contains(t, body, want)
	code, body = do(http.MethodGet, "/v1/operations/k-2", "")
	require.Equal(t, http.StatusNotFound, code, "nothing recorded: %s", body)

	// Every write route answers so: the 503 the OpenAPI document lists
	// for each (requireDocumentedStatuses leaves them to this test).
	attempt := "/v1/operations/k-1/attempts/01J000000000000000000000AA"
	bodies := map[string]string{
		"PUT /v1/operations/{key}":                         put,
		"POST /v1/operations/{key}/claim":                  `{"worker":"w"}`,
		"POST /v1/operations/{key}/attempts/{id}/dispatch": `{"fencing_token":1}`,
		"POST /v1/operations/{key}/attempts/{id}/lease":    `{"fencing_token":1,"lease_seconds":30}`,
		"POST /v1/operations/{key}/attempts/{id}/release":  `{"fencing_token":1}`,
		"POST /v1/operations/{key}/attempts/{id}/outcome":  `{"fencing_token":1,"outcome":"uncertain"}`,
		"POST /v1/operations/{key}/reconcile":              `{"found":false}`,
		"POST /v1/operations/{key}/approve":                `{"version":1,"fingerprint":"sha256:x","approver":"ana"}`,
		"POST /v1/operations/{key}/revise":                 `{"version":2,"payload":{},"actor":"ana"}`,
		"POST /v1/operations/{key}/resolve":                `{"decision":"cancel","reason":"x"}`,
		"POST /v1/events":                                  `{"source":"forms","event_id":"e","type":"submission.accepted","payload":{"submission_id":"1"}}`,
		"POST /v1/webhooks/{source}":                       `{"id":"evt_1","type":"invoice.paid","created":1764500000,"data":{"object":{"id":"in_1"}}}`,
		"PUT /v1/workflows/{key}":                          `{"steps":[{"name":"a","action":"x","destination":"d","payload":{}}]}`,
		"POST /v1/workflows/{key}/resume":                  `{}`,
		"POST /v1/workflows/{key}/steps/{step}/approve":    `{"version":1,"fingerprint":"sha256:x","approver":"ana"}`,
		"POST /v1/workflows/{key}/steps/{step}/revise":     `{"version":2,"payload":{},"actor":"ana"}`,
		"POST /v1/workflows/{key}/cancel":                  `{"reason":"x"}`,
	}
	for _, route := range documentedStatuses(t) {
		pattern, ok := strings.CutSuffix(route, " 503")
		if !ok || strings.HasPrefix(pattern, "GET ") {
			continue // a read's: TestReadsUnavailableDocumented, TestReadyzUnavailable
		}
		body, ok := bodies[pattern]
		require.True(t, ok, "%s lists a 503: give this test a body for it", pattern)
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("/v1/operations/{key}/attempts/{id}", attempt, "{key}", "k-1", "{source}", "stripe", "{step}", "a").Replace(path)
		header = nil
		if strings.HasPrefix(path, "/v1/webhooks/") {
			header = http.Header{webhook.StripeHeader: {webhook.SignStripe(testWebhookSecret, time.Now(), []byte(body))}}
		}
		code, got := do(method, path, body)
		require.Equal(t, http.StatusServiceUnavailable, code, "%s: %s", pattern, got)
		require.Contains(t, got, `"type":"`+httpapi.ProblemTypeBase+`schema_newer"`, pattern)
	}
}
