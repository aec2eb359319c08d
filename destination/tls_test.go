package destination_test

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// TestSendHTTPRefusedClientCertificate: a destination that requires a
// client certificate refuses a connection without an acceptable one in
// its TLS handshake, before it reads anything. With TLS 1.3 the client
// has written its request by the time the refusal (an alert) arrives;
// the request was still never read, so the outcome is retryable, as with
// TLS 1.2, where the refusal ends the handshake on the client's side too:
// not uncertain, which would hold every such operation for a person.
// Over HTTP/2 the client may instead see its new connection close before
// it opened the request's stream (retryable too), or, when the server's
// reset arrives before the alert is read, a failed write of the request:
// a failed write alone never shows that nothing arrived, and that one
// stays uncertain (the answer for every reset after writing began).
func TestSendHTTPRefusedClientCertificate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version uint16
		h2      bool
	}{
		{"TLS1.2", tls.VersionTLS12, false},
		{"TLS1.3", tls.VersionTLS13, false},
		{"TLS1.3/HTTP2", tls.VersionTLS13, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var reached atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
			srv.EnableHTTP2 = tc.h2
			srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}
			srv.Config.ErrorLog = discardLog()
			srv.StartTLS()
			t.Cleanup(srv.Close)
			client := srv.Client()
			tr := client.Transport.(*http.Transport)
			tr.TLSClientConfig.MaxVersion = tc.version
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/records", strings.NewReader(`{"name":"Ada"}`))
			require.NoError(t, err)
			resp, err := destination.SendHTTP(client, req, destination.HTTPPolicy{})
			require.Nil(t, resp)
			require.Zero(t, reached.Load())
			if tc.h2 && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)) {
				requireOutcome(t, err, opledger.OutcomeUncertain, true)
				return
			}
			requireOutcome(t, err, opledger.OutcomeRetryable, false)
		})
	}
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
