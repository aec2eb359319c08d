package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/webhook"
)

// A destination the server knows has its attempt series at 0 before any
// attempt of its has ended, or even begun: its first lease expiry is then
// an increase to Prometheus, whenever the scrapes fall.
func TestMetricsKnowConfiguredDestinations(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, httpapi.Options{Destinations: []string{"crm", "payments"}})
	status, body := b.raw(t, "GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, status)
	metrics := string(body)
	for _, d := range []string{"crm", "payments"} {
		require.Contains(t, metrics, `opledger_attempts_total{destination="`+d+`",outcome="lease_expired"} 0`)
		require.Contains(t, metrics, `opledger_attempts_open{destination="`+d+`"} 0`)
	}
}

// scrape returns what /metrics serves.
func (b *apiBundle) scrape(t *testing.T) string {
	t.Helper()
	status, body := b.raw(t, "GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, status)
	return string(body)
}

// An event its rule cannot map is refused and recorded nowhere: the
// counter of refused events is its only trace besides the request log, by
// rule and route, each pair at 0 from the start.
func TestMetricsCountRefusedEvents(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, apiOptions(t))
	series := func(rule, route string, n int) string {
		return fmt.Sprintf(`opledger_events_refused_total{route="%s",rule="%s"} %d`, route, rule, n)
	}
	before := b.scrape(t)
	for _, rule := range []string{"intake-accepted", "stripe-paid"} {
		for _, route := range []string{"/v1/events", "/v1/webhooks/stripe"} {
			require.Contains(t, before, series(rule, route, 0))
		}
	}

	status, data := b.raw(t, "POST", "/v1/events", b.token, []byte(`{"source":"forms","event_id":"e1","type":"submission.accepted","payload":{}}`))
	require.Equal(t, http.StatusUnprocessableEntity, status, "%s", data)
	hook := []byte(`{"id":"evt_1","type":"invoice.paid","data":{}}`)
	for range 2 {
		status, data = b.rawWith(t, "POST", "/v1/webhooks/stripe", "", hook,
			http.Header{webhook.StripeHeader: {webhook.SignStripe(testWebhookSecret, time.Now(), hook)}})
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s", data)
	}
	// A mapped event is no refusal.
	status, data = b.raw(t, "POST", "/v1/events", b.token, []byte(`{"source":"forms","event_id":"e2","type":"submission.accepted","payload":{"submission_id":"9"}}`))
	require.Equal(t, http.StatusCreated, status, "%s", data)

	after := b.scrape(t)
	require.Contains(t, after, series("intake-accepted", "/v1/events", 1))
	require.Contains(t, after, series("stripe-paid", "/v1/webhooks/stripe", 2))
	require.Contains(t, after, series("intake-accepted", "/v1/webhooks/stripe", 0))
	require.Contains(t, after, series("stripe-paid", "/v1/events", 0))
	_, err := b.ledger.GetEvent(context.Background(), "forms", "e1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "a refused event is not recorded")
}

// A webhook delivery refused before it becomes an event (a bad signature,
// as after a rotated secret; no event id, or one not in the key syntax; a
// compressed body) records
// nothing: the counter of refused deliveries is its trace, by source and
// reason, the signature's at 0 from the start.
func TestMetricsCountRefusedWebhooks(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, apiOptions(t))
	series := func(reason string, n int) string {
		return fmt.Sprintf(`opledger_webhooks_refused_total{reason="%s",source="stripe"} %d`, reason, n)
	}
	require.Contains(t, b.scrape(t), series("invalid_signature", 0))

	hook := []byte(`{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1"}}}`)
	sign := func(body, secret []byte) http.Header {
		return http.Header{webhook.StripeHeader: {webhook.SignStripe(secret, time.Now(), body)}}
	}
	for range 3 {
		status, data := b.rawWith(t, "POST", "/v1/webhooks/stripe", "", hook, sign(hook, []byte("rotated")))
		require.Equal(t, http.StatusUnauthorized, status, "%s", data)
	}
	noID := []byte(`{"type":"invoice.paid"}`)
	status, data := b.rawWith(t, "POST", "/v1/webhooks/stripe", "", noID, sign(noID, testWebhookSecret))
	require.Equal(t, http.StatusBadRequest, status, "%s", data)
	// An id the ledger cannot take as a key is refused when recorded.
	badID := []byte(`{"id":"evt bad id","type":"invoice.paid"}`)
	status, data = b.rawWith(t, "POST", "/v1/webhooks/stripe", "", badID, sign(badID, testWebhookSecret))
	require.Equal(t, http.StatusBadRequest, status, "%s", data)
	gz := sign(hook, testWebhookSecret)
	gz.Set("Content-Encoding", "gzip")
	status, data = b.rawWith(t, "POST", "/v1/webhooks/stripe", "", hook, gz)
	require.Equal(t, http.StatusUnsupportedMediaType, status, "%s", data)
	status, data = b.rawWith(t, "POST", "/v1/webhooks/stripe", "", hook, sign(hook, testWebhookSecret))
	require.Equal(t, http.StatusCreated, status, "a good delivery is no refusal: %s", data)

	after := b.scrape(t)
	require.Contains(t, after, series("invalid_signature", 3))
	require.Contains(t, after, series("invalid_input", 2))
	require.Contains(t, after, series("unsupported_media", 1))
	_, err := b.ledger.GetEvent(context.Background(), "stripe", "evt_1")
	require.NoError(t, err, "the good one was recorded")
}
