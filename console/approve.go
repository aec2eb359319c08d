package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
)

// approvedNotice is the notice's name, in place of a decision's, for an
// approval recorded on the operation page.
const approvedNotice = "approved"

// approve records an approval given on the operation page. The form names
// the version and fingerprint the page showed, so the approval is of that
// content: content revised since is refused (the ledger's MismatchError),
// and the page is shown again with the operation as it is now. It names
// the operation's UpdatedAt as the page showed it too: an operation that
// awaits approval of that same content but has changed since (cancelled
// and given a retry) is refused as stale (Approval.SeenUpdatedAt: the
// ledger checks it with the approval), and a form that does not say is
// refused. An approval
// refused for its name, posted from a page drawn before a revision or
// before the operation left awaiting_approval, is shown refused for that
// (showOperation), and one posted from a page drawn before any other
// change as stale, never as a name to correct beside the new version. A recorded
// approval, or one sent twice, sends the browser to the operation's page
// with its notice (Post/Redirect/Get).
func (c *Console) approve(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PathValue("key")
	name := r.PostForm.Get("approver")
	version, err := strconv.ParseInt(r.PostForm.Get("version"), 10, 64)
	named := int64(0) // the version the form named, if it named one
	if err == nil && version > 0 {
		named = version
	}
	seen, seenErr := time.Parse(time.RFC3339Nano, r.PostForm.Get("seen"))
	failed := func(status int, msg string) {
		c.showOperation(w, r, s, &decisionFailure{status: status, kind: approvedNotice, values: decisionValues{Operator: name}, msg: msg,
			version: named, seen: seen}, "")
	}
	fingerprint := r.PostForm.Get("fingerprint")
	if err != nil || version < 1 || fingerprint == "" || seenErr != nil || seen.IsZero() {
		failed(http.StatusBadRequest, "This form does not say which version of the content you approve (it comes from an older page of the console), so nothing was recorded. Look at the operation again before approving.")
		return
	}
	if msg := checkName(strings.TrimSpace(name)); msg != "" {
		failed(http.StatusBadRequest, msg)
		return
	}
	// The same version and fingerprint are not enough: an operation
	// cancelled before anyone approved it, then given a retry, awaits an
	// approval again with the same content, and one from a page drawn
	// before the cancellation would pass for it. So the approval names
	// the operation as the page showed it (its UpdatedAt), and the ledger
	// refuses it as stale when it has changed since.
	op, replayed, err := s.ledger.Approve(r.Context(), key, opledger.Approval{Version: version, Fingerprint: fingerprint,
		Approver: operatorName(name), SeenUpdatedAt: seen})
	var (
		me *opledger.MismatchError
		se *opledger.StateError
	)
	switch {
	case errors.Is(err, opledger.ErrStaleDecision):
		c.showOperation(w, r, s, &decisionFailure{status: http.StatusConflict, kind: approvedNotice,
			values: decisionValues{Operator: name}, stale: true, seen: seen, version: named}, "")
		return
	case errors.As(err, &me) && me.GivenVersion < me.StoredVersion:
		failed(http.StatusConflict, revisedMessage(me.StoredVersion))
		return
	case errors.As(err, &me):
		// Not a page drawn before a revision: a revision raises the
		// version, so the form names content the operation never had.
		failed(http.StatusConflict, fmt.Sprintf("This form names content the operation never had (version %d with another fingerprint than its own); it is at version %d. Yours was not recorded. Approve from the page as it is drawn now.", me.GivenVersion, me.StoredVersion))
		return
	case errors.As(err, &se):
		msg := "The operation is " + string(se.State) + " now and awaits no approval: yours was not recorded."
		if se.Operation != nil && se.Operation.ApprovedBy != "" {
			msg = fmt.Sprintf("Version %d was approved already, by %s, and the operation is %s now: yours was not recorded.",
				se.Operation.Version, se.Operation.ApprovedBy, se.State)
		}
		failed(http.StatusConflict, msg)
		return
	case errors.Is(err, opledger.ErrInvalidInput):
		failed(http.StatusBadRequest, consoleWords(strings.TrimPrefix(err.Error(), "invalid input: ")))
		return
	case c.missing(w, r, s, key, err):
		return
	case errors.Is(err, opledger.ErrStoreBusy):
		c.logBusy(r, err)
		failed(http.StatusServiceUnavailable, storeBusyMessage)
		return
	case err != nil:
		c.fail(w, r, s, http.StatusServiceUnavailable, "The approval could not be recorded.", err)
		return
	}
	notice := approvedNotice
	if replayed {
		notice = replayedNotice
	}
	c.redirectWithNotice(w, r, s, operationsPage, op.Key, notice)
}

// revisedMessage refuses an approval of content revised since its page
// was drawn: the operation is now at version.
func revisedMessage(version int64) string {
	return fmt.Sprintf("The content was revised since you opened this page: it is now version %d. Yours was not recorded. Look at it again before approving.", version)
}
