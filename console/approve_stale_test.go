package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// An approval refused for its own field (a name too long), posted from a
// page drawn before the content was revised, is refused as revised: the
// page drawn again must not offer the new version with only the name's
// error, as if the operator had seen that content.
func TestApprovalOfRevisedContentRefusedFirst(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	_, _, err := l.Record(ctx, opledger.Intent{Key: "mail:2", Action: "email.send", Destination: "email", RequiresApproval: true,
		Payload: json.RawMessage(`{"body":"Hello"}`)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	form := approvalOf(t, s.get("/operations/mail:2"))
	_, _, err = l.Revise(ctx, "mail:2", opledger.Revision{Payload: json.RawMessage(`{"body":"Send me your password"}`), Version: 2})
	require.NoError(t, err)
	form.Set("approver", strings.Repeat("é", 150)) // 300 bytes: more than the ledger keeps
	code, body := s.post("/operations/mail:2/approve", form)
	require.Equal(t, http.StatusConflict, code, "refused as revised, not for the name")
	require.Contains(t, body, "The content was revised since you opened this page: it is now version 2. Yours was not recorded.")
	require.NotContains(t, body, "Your name is 300 bytes long")
	op, err := l.Get(ctx, "mail:2")
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, op.State)

	// Cancelled while the page was open: refused because nothing awaits
	// an approval any more, not for the name.
	form = approvalOf(t, s.get("/operations/mail:2"))
	_, _, err = l.Resolve(ctx, "mail:2", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted", Operator: "B"})
	require.NoError(t, err)
	form.Set("approver", strings.Repeat("é", 150))
	code, body = s.post("/operations/mail:2/approve", form)
	require.Equal(t, http.StatusConflict, code, "refused as moved, not for the name")
	require.Contains(t, body, "The operation is failed now and awaits no approval: yours was not recorded.")
	require.NotContains(t, body, "Your name is 300 bytes long")
}
