package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
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
