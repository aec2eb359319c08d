package proxy_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/proxy"
)

// TestRejectionNotReplayedAfterRetry: once an operator authorized another
// attempt after a 4xx, that 4xx is no longer the request's answer: the
// next attempt may act (here it did, answering 500), and a repeat after
// the operator cancels it gets 409 with state failed, not the old 4xx.
func TestRejectionNotReplayedAfterRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, nil)
	b.up.Fail(fakedest.Invalid, fakedest.InternalAfterCommit)
	require.Equal(t, http.StatusUnprocessableEntity, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
	again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusUnprocessableEntity, again.status, "a rejection is replayed")
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))

	key := b.only(t).Key
	_, _, err := b.ledger.Resolve(t.Context(), key, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "fixed the campaign"})
	require.NoError(t, err)
	// The retry acts and answers 500: uncertain; with no lookup and no
	// key, the reconciler holds it.
	require.Equal(t, http.StatusInternalServerError, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
	b.reconcile(t)
	_, _, err = b.ledger.Resolve(t.Context(), key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "checked by hand"})
	require.NoError(t, err)
	a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Empty(t, a.header.Get(proxy.HeaderReplayed))
	require.Contains(t, string(a.body), `"state":"failed"`)
	require.Empty(t, b.only(t).Response, "the rejection's answer left the operation with the retry")
}

// TestProtectedRetryRejectionHeld: a 4xx to a protected re-forward of an
// uncertain request says nothing of what the first one did: the
// operation is held, and the answer says so (Opledger-State: held), as
// does every repeat.
func TestProtectedRetryRejectionHeld(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
		u.Idempotency = &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * time.Hour)}
	})
	b.up.Fail(fakedest.LoseResponse, fakedest.Invalid)
	require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
	b.reconcile(t) // the key is kept: pending, protected
	second := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusUnprocessableEntity, second.status)
	require.Equal(t, string(opledger.StateHeld), second.header.Get(proxy.HeaderState))
	require.Equal(t, opledger.StateHeld, b.only(t).State)
	third := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
	require.Equal(t, http.StatusConflict, third.status)
	require.Contains(t, string(third.body), `"state":"held"`)
}

// TestBasePathCredentialHidden: an upstream whose base path carries a
// credential (a bot token) has it neither in the operation as shown nor
// in the log line of an upstream conflict.
func TestBasePathCredentialHidden(t *testing.T) {
	t.Parallel()
	const secret = "123456:AAH-SECRET-BOT-TOKEN"
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(upstream.Close)
	l := openLedger(t, testdb.Stores()[0])
	b := proxyOn(t, l, proxy.Upstream{Name: "tg", URL: upstream.URL + "/bot" + secret})
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/sendMessage", "k1", token, `{"text":"hi"}`).status)
	shown, err := json.Marshal(b.only(t)) // as the API, the console and ops show it
	require.NoError(t, err)
	require.NotContains(t, string(shown), secret, "shown operation")

	// The same name in front of another URL (the token rotated).
	logs := &testrig.LogBuffer{}
	p2, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "tg", URL: upstream.URL + "/botNEW"}},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	srv2 := httptest.NewServer(p2)
	t.Cleanup(srv2.Close)
	a := (&bundle{url: srv2.URL}).send(t, http.MethodPost, "/sendMessage", "k1", token, `{"text":"hi"}`)
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Contains(t, logs.String(), "came from another upstream")
	require.NotContains(t, logs.String(), secret, "log")
}

// TestOtherServerStatuses pins the rows of docs/proxy.md for the 5xx
// statuses the table names by kind: 501 and 505 refuse the request before
// any effect, so they are saved and replayed as a 4xx is; any other 5xx
// but 503 (507 here) may come after the upstream acted: uncertain.
func TestOtherServerStatuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status  int
		decided bool
	}{{http.StatusNotImplemented, true}, {http.StatusHTTPVersionNotSupported, true}, {http.StatusInsufficientStorage, false}} {
		var calls atomic.Int32
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			calls.Add(1)
			w.WriteHeader(tc.status)
		}))
		b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "crm", URL: up.URL})
		first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, tc.status, first.status)
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		if tc.decided {
			require.Empty(t, first.header.Get(proxy.HeaderState), "%d", tc.status)
			require.Equal(t, tc.status, again.status, "%d is replayed", tc.status)
			require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		} else {
			require.Equal(t, string(opledger.StateUncertain), first.header.Get(proxy.HeaderState), "%d", tc.status)
			require.Equal(t, http.StatusConflict, again.status, "%d: %s", tc.status, again.body)
		}
		require.Equal(t, int32(1), calls.Load(), "%d: forwarded once", tc.status)
		up.Close()
	}
}
