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

// An approval posted from a page drawn before the operation was cancelled
// and then given a retry (which, since nothing had approved it, waits for
// an approval again) is refused as stale: the same version and
// fingerprint are not enough, since the operator approving has seen
// neither the cancellation nor the retry, and the retry asks for an
// approval given after it.
func TestApprovalFromPageBeforeCancelAndRetryRefused(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	_, _, err := l.Record(ctx, opledger.Intent{Key: "mail:3", Action: "email.send", Destination: "email", RequiresApproval: true,
		Payload: json.RawMessage(`{"body":"Hello"}`)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	form := approvalOf(t, s.get("/operations/mail:3"))
	form.Set("approver", "Lea")
	_, _, err = l.Resolve(ctx, "mail:3", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "the customer withdrew", Operator: "B"})
	require.NoError(t, err)
	op, _, err := l.Resolve(ctx, "mail:3", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "send it after all", Operator: "C"})
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, op.State, "the retry waits for an approval again")

	code, body := s.post("/operations/mail:3/approve", form)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "Another decision was recorded since you opened this page (operator authorized retry, by C): it is now awaiting_approval. Yours was not recorded.")
	require.Contains(t, body, `value="Lea"`, "the name typed is kept")
	op, err = l.Get(ctx, "mail:3")
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, op.State, "not approved")
	require.Empty(t, op.ApprovedBy)

	// From the page as it is now, the approval is recorded.
	form = approvalOf(t, s.get("/operations/mail:3"))
	form.Set("approver", "Lea")
	code, body = s.post("/operations/mail:3/approve", form)
	require.Equal(t, http.StatusSeeOther, code, body)
	op, err = l.Get(ctx, "mail:3")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	require.Equal(t, consoleActor(t, l, token, "Lea"), op.ApprovedBy)

	// A form that does not say which state of the operation it saw (a
	// page of an older console) is refused, as a decision's is.
	_, _, err = l.Record(ctx, opledger.Intent{Key: "mail:4", Action: "email.send", Destination: "email", RequiresApproval: true,
		Payload: json.RawMessage(`{"body":"Hello"}`)})
	require.NoError(t, err)
	form = approvalOf(t, s.get("/operations/mail:4"))
	form.Del("seen")
	code, body = s.post("/operations/mail:4/approve", form)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "does not say which version")
	op, err = l.Get(ctx, "mail:4")
	require.NoError(t, err)
	require.Equal(t, opledger.StateAwaitingApproval, op.State)
}

// An approval refused for its own field (a name too long), posted from a
// page drawn before the operation was cancelled and given a retry, is
// refused as stale, as one posted from a page drawn before a revision is
// refused as revised: the page drawn again must not offer the approval
// beside the name's error only, as if the operator had seen what changed.
func TestApprovalWithBadNameFromStalePageRefusedAsStale(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	_, _, err := l.Record(ctx, opledger.Intent{Key: "mail:5", Action: "email.send", Destination: "email", RequiresApproval: true,
		Payload: json.RawMessage(`{"body":"Hello"}`)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	form := approvalOf(t, s.get("/operations/mail:5"))
	_, _, err = l.Resolve(ctx, "mail:5", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "the customer withdrew", Operator: "B"})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "mail:5", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "send it after all", Operator: "C"})
	require.NoError(t, err)
	form.Set("approver", strings.Repeat("é", 150)) // 300 bytes: more than the ledger keeps
	code, body := s.post("/operations/mail:5/approve", form)
	require.Equal(t, http.StatusConflict, code, "refused as stale, not for the name")
	require.Contains(t, body, "Another decision was recorded since you opened this page (operator authorized retry, by C)")
	require.NotContains(t, body, "Your name is 300 bytes long")

	// From a page as it is now, the name's error is the refusal.
	form = approvalOf(t, s.get("/operations/mail:5"))
	form.Set("approver", strings.Repeat("é", 150))
	code, body = s.post("/operations/mail:5/approve", form)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "Your name is 300 bytes long")
}
