package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
)

// TestProblemTitles: every problem kind the API and the proxy answer with
// has a title.
func TestProblemTitles(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{
		"fingerprint_mismatch", "in_progress", "not_due", "invalid_state", "stale_fencing_token",
		"stale_finding", "stale_decision", "not_found", "invalid_key", "invalid_input", "invalid_json",
		"reason_required", "unauthorized", "invalid_signature", "payload_too_large", "method_not_allowed",
		"internal", "unavailable", "store_busy", "store_full", "mapping_failed",
		// The Idempotency-Key proxy's.
		"idempotency_key_required", "invalid_idempotency_key", "upstream_response_lost",
		"upstream_unreachable", "upstream_conflict", "no_upstream",
	} {
		rec := httptest.NewRecorder()
		httpapi.WriteProblem(rec, httptest.NewRequest(http.MethodGet, "/v1/stats", nil), http.StatusConflict, kind, "detail", nil)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), kind)
		require.Equal(t, httpapi.ProblemTypeBase+kind, p.Type)
		require.NotEmpty(t, p.Title, kind)
	}
}
