package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// A decision or an approval refused because another process held the
// store's lock (opledger.ErrStoreBusy, which records nothing) is shown on
// the operation's page with what was typed and a word that nothing was
// recorded, so the operator sends it again rather than typing the reason
// anew from an error page; sent again once the lock is gone, it is
// recorded.
func TestDecisionWhileStoreBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme", SQLiteBusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	c, err := console.New(l, console.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	heldOp(t, l, opledger.Intent{Key: "busy:1"}, "timeout", "no lookup")
	_, _, err = l.Record(ctx, opledger.Intent{Key: "busy:2", Action: "email.send", Destination: "email", RequiresApproval: true,
		Payload: json.RawMessage(`{"body":"Hello"}`)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	csrf, seen := formOf(t, s.get("/operations/busy:1"))
	decision := url.Values{"csrf": {csrf}, "seen": {seen}, "decision": {"authorize_retry"},
		"reason": {"Checked the CRM: no record of it"}, "operator": {"Maria"}}
	approval := approvalOf(t, s.get("/operations/busy:2"))
	approval.Set("approver", "Lea")

	release := testdb.HoldLock(t, dsn, "acme", "busy:1")
	code, body := s.post("/operations/busy:1/resolve", decision)
	codeApproval, bodyApproval := s.post("/operations/busy:2/approve", approval)
	release()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "nothing was recorded. Send it again.")
	require.Contains(t, body, "Checked the CRM: no record of it</textarea>", "the reason typed is kept")
	require.Contains(t, body, `value="Maria"`)
	require.Equal(t, http.StatusServiceUnavailable, codeApproval)
	require.Contains(t, bodyApproval, "nothing was recorded. Send it again.")
	require.Contains(t, bodyApproval, `value="Lea"`)
	op, err := l.Get(ctx, "busy:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, op.State, "nothing was recorded")

	code, body = s.post("/operations/busy:1/resolve", decision)
	require.Equal(t, http.StatusSeeOther, code, body)
	code, body = s.post("/operations/busy:2/approve", approval)
	require.Equal(t, http.StatusSeeOther, code, body)
	op, err = l.Get(ctx, "busy:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	op, err = l.Get(ctx, "busy:2")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
}
