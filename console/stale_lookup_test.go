package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A decision refused because the reconciler took the uncertain operation
// for a lookup after the page was drawn (Ledger.ClaimLookup, which writes
// no timeline entry) says so: it does not name the newest timeline entry,
// from before the page, as what changed ("it is now uncertain (by
// worker-7)"). A change with its entry is still named by it.
func TestStaleByLookupClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, _ := shiftedConsole(t, opledger.Options{Worker: "worker-7"})
	cl, err := l.Claim(ctx, "u:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "u:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "u:1", cl.AttemptID, cl.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, "u:1", cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	retry := func() (int, string) {
		t.Helper()
		csrf, seen := formOf(t, s.get("/operations/u:1"))
		return s.post("/operations/u:1/resolve", url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"authorize_retry"}, "reason": {"absent"}})
	}
	seen, err := l.Get(ctx, "u:1")
	require.NoError(t, err)
	csrf, seenField := formOf(t, s.get("/operations/u:1"))
	taken, err := l.ClaimLookup(ctx, seen, time.Minute)
	require.NoError(t, err)
	require.True(t, taken)
	code, body := s.post("/operations/u:1/resolve", url.Values{"csrf": {csrf}, "seen": {seenField}, "decision": {"authorize_retry"}, "reason": {"absent"}})
	require.Equal(t, http.StatusConflict, code)
	require.NotContains(t, body, "it is now uncertain (by worker-7)", "worker-7's report came before the page")
	require.Contains(t, body, "The reconciler began looking this operation up at the destination since you opened this page: it is still uncertain, and the lookup&#39;s answer may settle it. Yours was not recorded.")

	// The lookup's answer, with its entry, is named by it.
	csrf, seenField = formOf(t, body)
	_, err = l.DeferReconcile(ctx, "u:1", time.Minute, "lookup failed: 503")
	require.NoError(t, err)
	code, body = s.post("/operations/u:1/resolve", url.Values{"csrf": {csrf}, "seen": {seenField}, "decision": {"authorize_retry"}, "reason": {"absent"}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "The operation has changed since you opened this page (reconcile deferred, by reconciler")
	code, body = retry()
	require.Equal(t, http.StatusSeeOther, code, "drawn again, the page decides: %s", body)
	op, err := l.Get(ctx, "u:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
}
