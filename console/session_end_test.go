package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A decision posted after its session ended (it expired, was signed out
// in another tab, or its token was revoked) says so, that nothing was
// done, and links to signing in again back to the operation's page, not
// "Sign in first." with a link to the queue, as if the operator had never
// signed in.
func TestDecisionAfterSessionEnded(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	heldOp(t, l, opledger.Intent{Key: "ended:1"}, "timeout", "no lookup")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	csrf, seen := formOf(t, s.get("/operations/ended:1"))

	tok, err := l.Authenticate(context.Background(), token)
	require.NoError(t, err)
	require.NoError(t, l.RevokeToken(context.Background(), tok.ID))
	code, body := s.post("/operations/ended:1/resolve", url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"cancel"},
		"reason": {"not wanted"}})
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "Your session has ended (after 12 hours, on signing out, or when its token was revoked), so nothing was done.")
	require.Contains(t, body, `href="/login?next=%2Foperations%2Fended%3A1"`)
	op, err := l.Get(context.Background(), "ended:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State)
}
