package proxy_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proxy"
)

// TestNewRefusesNilLedger: proxy.New with a nil ledger is refused (it
// used to panic).
func TestNewRefusesNilLedger(t *testing.T) {
	t.Parallel()
	_, err := proxy.New(nil, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: "http://127.0.0.1:1"}}})
	require.EqualError(t, err, "proxy: a ledger is required: New was given a nil *opledger.Ledger")
}
