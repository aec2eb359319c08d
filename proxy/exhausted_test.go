package proxy_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestRetryableAnswerSaysExhausted: a 429 or 503 (or a 401 under a
// credential_header of its own) that used up the upstream's retry
// attempts is passed on as the upstream gave it, Retry-After included,
// but the operation is failed and no repeat is forwarded again: the
// answer says so (Opledger-State: failed), as the 502 of an upstream
// that could not be reached does, so that a caller does not take the
// upstream's Retry-After for leave to repeat the same key. A retryable
// answer that leaves attempts says nothing: the operation is pending.
func TestRetryableAnswerSaysExhausted(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
			two, none := 2, destination.Duration(0)
			u.Retry = &destination.RetryConfig{MaxAttempts: &two, InitialDelay: &none, MaxDelay: &none}
			u.CredentialHeader = "X-Api-Key"
		})
		b.up.SetRetryAfter("0")
		b.up.Fail(fakedest.TooMany, fakedest.Unauthorized)
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusTooManyRequests, a.status)
		require.Empty(t, a.header.Get(proxy.HeaderState), "attempts are left: the operation is pending")
		require.Equal(t, opledger.StatePending, b.only(t).State)

		a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusUnauthorized, a.status, "the upstream's answer is passed on: %s", a.body)
		require.Equal(t, string(opledger.StateFailed), a.header.Get(proxy.HeaderState), "the last attempt was used up")
		require.Equal(t, opledger.StateFailed, b.only(t).State)

		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, again.status)
		require.Contains(t, string(again.body), `"state":"failed"`)
		require.Equal(t, 2, b.up.Creates())
	})
}
