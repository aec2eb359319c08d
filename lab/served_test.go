package lab_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/lab"
)

// The destinations file Served writes loads, and declares for each
// destination what the destination itself says it offers.
func TestServedDestinationsYAML(t *testing.T) {
	t.Parallel()
	s := lab.NewServed()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	set, err := destination.Load([]byte(s.DestinationsYAML(srv.URL)), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { set.Close() })
	require.Equal(t, []string{"crm", "email", "payment"}, set.Names())
	for name, want := range map[string]destination.Capabilities{
		"crm": s.CRM.Capabilities(), "email": s.Email.Capabilities(), "payment": s.Payment.Capabilities(),
	} {
		d, ok := set.Get(name)
		require.True(t, ok, name)
		got := d.Capabilities()
		require.Equal(t, want.IdempotencyKey, got.IdempotencyKey, name)
		require.Equal(t, want.UniqueReference, got.UniqueReference, name)
		require.Equal(t, want.Lookup != nil, got.Lookup != nil, name)
		if got.Lookup != nil {
			require.True(t, got.Lookup.Authoritative, name)
		}
	}
	resp, err := http.Post(srv.URL+"/payment/faults", "application/json", strings.NewReader(`["429", "validation"]`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 2, s.Payment.PendingFaults())
	resp, err = http.Post(srv.URL+"/payment/faults", "application/json", strings.NewReader(`{"fault":"429"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
