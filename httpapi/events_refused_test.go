package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// An event posted to POST /v1/events that is refused before it becomes an
// event (a body that is no JSON event, a field it lacks, a body too large
// or compressed) records nothing, as a refused webhook delivery does: the
// counter of refused event requests is its trace, by reason, each reason
// at 0 from the start. A mapped event and one its rule cannot map (counted
// by opledger_events_refused_total) are not among them.
func TestMetricsCountRefusedEventRequests(t *testing.T) {
	t.Parallel()
	opts := apiOptions(t)
	opts.MaxBodyBytes = 2048
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, opts)
	series := func(reason string, n int) string {
		return fmt.Sprintf(`opledger_event_requests_refused_total{reason="%s"} %d`, reason, n)
	}
	before := b.scrape(t)
	for _, reason := range []string{"invalid_json", "invalid_input", "payload_too_large", "unsupported_media", "request_timeout"} {
		require.Contains(t, before, series(reason, 0))
	}

	post := func(body []byte, hdr http.Header, want int) {
		t.Helper()
		status, data := b.rawWith(t, "POST", "/v1/events", b.token, body, hdr)
		require.Equal(t, want, status, "%s", data)
	}
	post([]byte(`{"source":"forms",`), nil, http.StatusBadRequest)
	post([]byte(`{"source":"forms","event_id":"e1","type":"t","payload":{},"extra":1}`), nil, http.StatusBadRequest)
	post([]byte(`{"source":"forms","type":"t","payload":{}}`), nil, http.StatusBadRequest)                  // no event id
	post([]byte(`{"source":"forms","event_id":"a b","type":"t","payload":{}}`), nil, http.StatusBadRequest) // not in the key syntax
	post([]byte(`{"source":"forms","event_id":"e1","type":"t","payload":"`+string(bytes.Repeat([]byte("x"), 4096))+`"}`), nil,
		http.StatusRequestEntityTooLarge)
	post([]byte(`{"source":"forms","event_id":"e1","type":"t","payload":{}}`), http.Header{"Content-Encoding": {"gzip"}},
		http.StatusUnsupportedMediaType)
	// Neither a mapped event nor one its rule cannot map is a refused request.
	post([]byte(`{"source":"forms","event_id":"e2","type":"submission.accepted","payload":{"submission_id":"9"}}`), nil, http.StatusCreated)
	post([]byte(`{"source":"forms","event_id":"e3","type":"submission.accepted","payload":{}}`), nil, http.StatusUnprocessableEntity)

	after := b.scrape(t)
	require.Contains(t, after, series("invalid_json", 2))
	require.Contains(t, after, series("invalid_input", 2))
	require.Contains(t, after, series("payload_too_large", 1))
	require.Contains(t, after, series("unsupported_media", 1))
	require.Contains(t, after, series("request_timeout", 0))
	_, err := b.ledger.GetEvent(context.Background(), "forms", "e1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "a refused request records nothing")
}

// A request to POST /v1/events refused before its body is read (no
// token, an unknown one, two Authorization headers, a read-only token, a
// query parameter on the write) is lost as surely as one whose body is no
// event: it is counted too, by the problem type answered, each reason at
// 0 from the start. A sender whose token was revoked shows as a rise of
// unauthorized.
func TestMetricsCountEventRequestsRefusedBeforeTheBody(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, apiOptions(t))
	series := func(reason string, n int) string {
		return fmt.Sprintf(`opledger_event_requests_refused_total{reason="%s"} %d`, reason, n)
	}
	before := b.scrape(t)
	for _, reason := range []string{"unauthorized", "forbidden", "invalid_input"} {
		require.Contains(t, before, series(reason, 0))
	}
	event := []byte(`{"source":"forms","event_id":"e1","type":"t","payload":{}}`)
	post := func(path, token string, hdr http.Header, want int) {
		t.Helper()
		status, data := b.rawWith(t, "POST", path, token, event, hdr)
		require.Equal(t, want, status, "%s", data)
	}
	post("/v1/events", "", nil, http.StatusUnauthorized)
	post("/v1/events", "not-a-token", nil, http.StatusUnauthorized)
	post("/v1/events", "", http.Header{"Authorization": {"Bearer " + b.token, "Bearer " + b.token}}, http.StatusUnauthorized)
	post("/v1/events", b.readToken, nil, http.StatusForbidden)
	post("/v1/events?source=forms", b.token, nil, http.StatusBadRequest)
	// Another route's refusals are not this route's.
	status, data := b.rawWith(t, "PUT", "/v1/operations/k1", "", []byte(`{}`), nil)
	require.Equal(t, http.StatusUnauthorized, status, "%s", data)

	after := b.scrape(t)
	require.Contains(t, after, series("unauthorized", 3))
	require.Contains(t, after, series("forbidden", 1))
	require.Contains(t, after, series("invalid_input", 1))
	_, err := b.ledger.GetEvent(context.Background(), "forms", "e1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "a refused request records nothing")
}

// A delivery to a webhook source the server does not configure (a
// provider pointed at a misspelt or removed endpoint) is answered 404 and
// recorded nowhere: it is counted under one fixed source label, never the
// path's name (the sender's text, which would grow the series without
// bound), at 0 from the start.
func TestMetricsCountWebhooksOfAnUnknownSource(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, apiOptions(t))
	const unknown = `opledger_webhooks_refused_total{reason="unknown_source",source="(unknown)"} %d`
	require.Contains(t, b.scrape(t), fmt.Sprintf(unknown, 0))
	hook := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	for _, source := range []string{"strpie", "other", "strpie"} {
		status, data := b.rawWith(t, "POST", "/v1/webhooks/"+source, "", hook, nil)
		require.Equal(t, http.StatusNotFound, status, "%s", data)
		require.Equal(t, "not_found", problemKind(t, data))
	}
	after := b.scrape(t)
	require.Contains(t, after, fmt.Sprintf(unknown, 3))
	require.NotContains(t, after, `source="strpie"`)
	require.NotContains(t, after, `source="other"`)
}
