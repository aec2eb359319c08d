package proxy_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

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

// TestRetryableAnswerSaysTheSpacing: an upstream's 429 or 503 is passed
// on with its Retry-After, but the upstream's retry policy may space
// the attempts further (initial_delay, with jitter): a repeat after the
// upstream's Retry-After was refused with 409 not_due. The answer's
// Retry-After is now the operation's own wait when that is longer, so
// that a repeat after it is forwarded; an upstream's wait as long is
// passed on as it was sent.
func TestRetryableAnswerSaysTheSpacing(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
			spacing := destination.Duration(20 * time.Second)
			u.Retry = &destination.RetryConfig{InitialDelay: &spacing}
		})
		b.up.SetRetryAfter("1")
		// The policy's wait is random up to 20 s: over several keys, a
		// Retry-After left at the upstream's 1 s is found out.
		for i := range 6 {
			key := fmt.Sprintf("key-%d", i)
			b.up.Fail(fakedest.TooMany)
			a := b.send(t, http.MethodPost, "/records", key, token, body1)
			require.Equal(t, http.StatusTooManyRequests, a.status)
			require.Len(t, a.header.Values("Retry-After"), 1)
			wait, err := strconv.Atoi(a.header.Get("Retry-After"))
			require.NoError(t, err)
			b.offset.Add(int64(time.Duration(wait) * time.Second)) // the ledger's clock, to the Retry-After
			a = b.send(t, http.MethodPost, "/records", key, token, body1)
			require.Equal(t, http.StatusCreated, a.status, "a repeat after Retry-After %d s is forwarded: %s", wait, a.body)
		}

		b.up.SetRetryAfter("Wed, 21 Oct 2037 07:28:00 GMT")
		b.up.Fail(fakedest.TooMany)
		a := b.send(t, http.MethodPost, "/records", "key-long", token, body1)
		require.Equal(t, http.StatusTooManyRequests, a.status)
		require.Equal(t, "Wed, 21 Oct 2037 07:28:00 GMT", a.header.Get("Retry-After"), "the upstream's wait, as sent")
	})
}
