package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestProblemTitles: every problem kind the API and the proxy answer with
// has a title.
func TestProblemTitles(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{
		"fingerprint_mismatch", "in_progress", "not_due", "invalid_state", "stale_fencing_token",
		"stale_finding", "stale_decision", "not_found", "invalid_key", "invalid_input", "invalid_json",
		"reason_required", "unauthorized", "invalid_signature", "payload_too_large", "method_not_allowed",
		"internal", "unavailable", "store_busy", "store_full", "schema_newer", "mapping_failed", "destination_not_served",
		// The Idempotency-Key proxy's.
		"idempotency_key_required", "invalid_idempotency_key", "upstream_response_lost",
		"upstream_unreachable", "upstream_conflict", "no_upstream", "request_timeout",
	} {
		rec := httptest.NewRecorder()
		httpapi.WriteProblem(rec, httptest.NewRequest(http.MethodGet, "/v1/stats", nil), http.StatusConflict, kind, "detail", nil)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), kind)
		require.Equal(t, httpapi.ProblemTypeBase+kind, p.Type)
		require.NotEmpty(t, p.Title, kind)
	}
}

// TestTypeErrorsInCallersWords: a value of the wrong JSON type is named by
// its field and what it takes, a time that does not parse by its field and
// the form it takes, not in Go's terms.
func TestTypeErrorsInCallersWords(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	for _, tc := range []struct{ method, path, body, want string }{
		{"PUT", "/v1/operations/k:1", `{"action":"a","destination":"d","version":"1"}`,
			`field version at line 1, column 46: expected a whole number, got JSON string`},
		{"PUT", "/v1/operations/k:1", `{"action":"a","destination":"d","requires_approval":"yes"}`,
			`field requires_approval at line 1, column 58: expected true or false, got JSON string`},
		{"POST", "/v1/operations/k:1/reconcile", `{"looked_at":"yesterday"}`,
			`field looked_at: a time is RFC 3339 text, such as "2026-12-04T10:00:00Z" (got "yesterday")`},
		{"POST", "/v1/events", `{"source":"s","event_id":"e","type":"t","occurred_at":"not-a-time","payload":{}}`,
			`field occurred_at: a time is RFC 3339 text`},
	} {
		status, data := b.raw(t, tc.method, tc.path, b.token, []byte(tc.body))
		require.Equal(t, http.StatusBadRequest, status, string(data))
		var p struct{ Type, Detail string }
		require.NoError(t, json.Unmarshal(data, &p))
		require.Equal(t, "https://opledger.dev/problems/invalid_json", p.Type)
		require.Contains(t, p.Detail, tc.want)
	}
}
