package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/advance"
	"github.com/opledger/opledger/internal/redact"
)

// The limits of a decision's fields, in bytes, as the ledger keeps them.
// The console checks them itself so that it can say which field is wrong
// in its own words.
const (
	maxReasonBytes   = opledger.MaxReasonBytes
	maxRefBytes      = opledger.MaxDestinationRefBytes
	maxOperatorBytes = opledger.MaxOperatorBytes
)

// noticeCookie carries the notice of a recorded decision to the page the
// browser is sent to next, once, for that operation only. A link cannot
// set it, and its value is signed with the session's secret (noticeValue),
// so neither a link nor a page sharing the host can make the page claim a
// decision nobody took.
const noticeCookie = "opledger_notice"

// noticeValue is the notice cookie's value for a decision of kind on key
// in the session with secret: kind~key~MAC.
func noticeValue(secret, kind, key string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("opledger console notice\x00" + kind + "\x00" + key))
	return kind + "~" + key + "~" + hex.EncodeToString(m.Sum(nil))
}

// notices are the only texts the operation page shows as a notice, by the
// decision recorded.
var notices = map[opledger.DecisionKind]string{
	opledger.DecisionMarkSucceeded:  "Recorded: succeeded, with the reference you found.",
	opledger.DecisionAuthorizeRetry: "Recorded: one more attempt is authorized.",
	opledger.DecisionCancel:         "Recorded: cancelled.",
}

// replayedNotice is the notice's name, in place of a decision's, for a
// decision or approval that repeated the one that last moved the
// operation (a form sent twice): the ledger recorded nothing.
const replayedNotice = "replayed"

// retryAwaitsApprovalNotice is the notice's name, in place of
// authorize_retry's, for a retry authorized of an operation whose content
// was never approved: the ledger moved it to awaiting_approval, not
// pending, and nothing is sent until someone approves it.
const retryAwaitsApprovalNotice = "retry_awaits_approval"

// noticeText is the notice named kind: a decision's, approvedNotice's,
// replayedNotice's or retryAwaitsApprovalNotice's. op is the operation
// as the page shows it: retryAwaitsApprovalNotice names its owner, who
// decides, when it has one.
func noticeText(kind string, op *opledger.Operation) string {
	switch kind {
	case replayedNotice:
		return "Already recorded: this decision had been made, so nothing changed."
	case approvedNotice:
		return "Recorded: approved. A worker sends this content when it is due."
	case retryAwaitsApprovalNotice:
		by := ""
		if op != nil && op.Owner != "" {
			by = " by its owner, " + visibleText(op.Owner) + ","
		}
		return "Recorded: a retry is authorized, but this content was never approved, so nothing is sent yet: it now awaits approval" +
			by + " before any attempt."
	}
	return notices[opledger.DecisionKind(kind)]
}

// decisionValues are the fields of a decision form as the operator typed
// them: a refused decision shows them again.
type decisionValues struct {
	Ref, Reason, Operator string
}

// decisionForm is one decision form of the operation page.
type decisionForm struct {
	Kind opledger.DecisionKind
	// ID ends the ids of the form's elements.
	ID                     string
	Title, Confirm, Button string
	ButtonID               string
	Danger, NeedsRef       bool
	// Values, Error and Field come from a refused decision of this kind:
	// what was typed, why it was refused and which field ("ref", "reason",
	// "operator") the reason is about ("" for the form as a whole).
	Values       decisionValues
	Error, Field string
}

// decisionForms are the decision forms in the order the page shows them.
var decisionForms = []decisionForm{
	{Kind: opledger.DecisionMarkSucceeded, ID: "s", Title: "It happened", Confirm: "Mark this operation succeeded?",
		Button: "Mark succeeded", ButtonID: "decide-succeeded", NeedsRef: true},
	{Kind: opledger.DecisionAuthorizeRetry, ID: "r", Title: "Send again",
		Confirm: "Allow one more attempt? Only do this if you checked that the destination has no effect.",
		Button:  "Authorize retry", ButtonID: "decide-retry"},
	{Kind: opledger.DecisionCancel, ID: "c", Title: "Drop it", Confirm: "Cancel this operation?",
		Button: "Cancel operation", ButtonID: "decide-cancel", Danger: true},
}

// approvalForm is the operation page's approval form, shown while the
// operation awaits approval: the name typed and why it was refused, when
// an approval was.
type approvalForm struct {
	Name, Error string
}

// decisionFailure is a decision the console did not record, to show with
// the operation as it is now.
type decisionFailure struct {
	status int
	// kind is the decision refused, or approvedNotice for an approval
	// (whose values hold the approver's name as Operator).
	kind   opledger.DecisionKind
	values decisionValues
	field  string
	msg    string
	// stale: the operation changed since the page was shown; the message
	// is written from the operation as it is now.
	stale bool
	// seen is the operation's UpdatedAt as the posted page showed it
	// (zero when the form did not say): a failure for any other reason
	// (an approval's: for any other than a conflict, its revision or its
	// move) is shown as stale when the operation has changed since, so
	// that the page drawn again never names the new version while the
	// operator has not seen what changed.
	seen time.Time
	// version is the content version an approval form named (0 for a
	// decision, or a form that did not say): an approval refused for any
	// other reason is shown as refused for the revision when the content
	// was revised since, or for the move when the operation no longer
	// awaits approval, so that the page drawn again never offers the new
	// version with only a field's error, as if the operator had seen it.
	version int64
}

// operation shows an operation, with the notice of the decision just
// recorded, if any.
func (c *Console) operation(w http.ResponseWriter, r *http.Request, s *session) {
	c.showOperation(w, r, s, nil, c.takeNotice(w, r, s, operationsPage))
}

// The pages a notice cookie is kept for: an operation's, a workflow's.
const (
	operationsPage = "/operations/"
	workflowsPage  = "/workflows/"
)

// makeNoticeCookie is the cookie of a notice with value for the pages
// under page (operationsPage, workflowsPage), which lasts maxAge seconds
// (deleted when negative).
func (c *Console) makeNoticeCookie(r *http.Request, page, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: noticeCookie, Value: value, Path: page, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.secure(r)}
}

// redirectWithNotice ends a decision recorded (or replayed) on the page
// of key under page: Post/Redirect/Get to that page, which shows notice
// once (takeNotice).
func (c *Console) redirectWithNotice(w http.ResponseWriter, r *http.Request, s *session, page, key, notice string) {
	http.SetCookie(w, c.makeNoticeCookie(r, page, noticeValue(s.secret, notice, key), 60))
	http.Redirect(w, r, page+url.PathEscape(key), http.StatusSeeOther)
}

// takeNotice returns the kind of the notice redirectWithNotice left for
// the page of the request's key under page, and deletes its cookie; ""
// when there is none, or its cookie was made for another page or session.
func (c *Console) takeNotice(w http.ResponseWriter, r *http.Request, s *session, page string) string {
	ck, err := r.Cookie(noticeCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, c.makeNoticeCookie(r, page, "", -1))
	kind, _, ok := strings.Cut(ck.Value, "~")
	if !ok || !hmac.Equal([]byte(ck.Value), []byte(noticeValue(s.secret, kind, r.PathValue("key")))) {
		return ""
	}
	return kind
}

// showOperation renders the operation page: with the notice named
// noticeKind (noticeText), if any; with a refused decision f, in f's
// status, the refusal inside the form of its decision (or above the forms
// when the operation no longer offers it) and what was typed.
func (c *Console) showOperation(w http.ResponseWriter, r *http.Request, s *session, f *decisionFailure, noticeKind string) {
	key := r.PathValue("key")
	op, err := s.ledger.Get(r.Context(), key)
	if errors.Is(err, opledger.ErrNotFound) && c.stepNotRecorded(w, r, s, key) {
		return
	}
	if c.missing(w, r, s, key, err) {
		return
	}
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	attempts, err := s.ledger.Attempts(r.Context(), key)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	timeline, err := s.ledger.Timeline(r.Context(), key)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	// Shown as the API shows it: sensitive values masked in the payload,
	// the destination reference and the attempts' references.
	attempts = op.MaskedAttempts(attempts)
	op = op.Masked()
	masked := string(op.Payload)
	notice := ""
	if noticeKind != "" {
		notice = noticeText(noticeKind, op)
	}
	// A step of a workflow is linked to it; an operation recorded on its
	// own under a key of the same shape (a name the workflow has no step
	// of) is not.
	workflowKey, stepName, isStep := opledger.SplitWorkflowStepKey(op.Key)
	if isStep {
		wf, err := s.ledger.GetWorkflow(r.Context(), workflowKey)
		isStep = err == nil && wf.Step(stepName) != nil
	}
	// A compacted operation is only its tombstone: no decision applies.
	canSucceed := !op.Tombstoned && (op.State == opledger.StateHeld || op.State == opledger.StateUncertain || op.State == opledger.StateFailed)
	canCancel := !op.Tombstoned && (op.State == opledger.StateHeld || op.State == opledger.StateUncertain || op.State == opledger.StatePending || op.State == opledger.StateAwaitingApproval)
	canApprove := !op.Tombstoned && op.State == opledger.StateAwaitingApproval
	// The failed step a workflow was given up on at is not attempted
	// again: the ledger refuses a retry of it.
	givenUp := op.State == opledger.StateFailed && workflowCancelledAt(timeline) != nil
	canRetry := canSucceed && !givenUp
	status, topError, replaceURL := http.StatusOK, "", ""
	if f != nil {
		// An approval refused for anything but a conflict is refused for
		// the revision or the move first, which say what changed; then,
		// as a decision, as stale. One the ledger refused as a conflict
		// (MismatchError, StateError) keeps that refusal, which says it.
		approval := f.kind == approvedNotice
		switch {
		case !approval || f.version == 0 || f.status == http.StatusConflict:
		case op.State != opledger.StateAwaitingApproval:
			f.status, f.msg = http.StatusConflict, "The operation is "+string(op.State)+" now and awaits no approval: yours was not recorded."
		case f.version < op.Version:
			f.status, f.msg = http.StatusConflict, revisedMessage(op.Version)
		}
		if !f.seen.IsZero() && !f.seen.Equal(op.UpdatedAt) && (!approval || f.status != http.StatusConflict) {
			f.status, f.stale, f.field = http.StatusConflict, true, ""
		}
		status = f.status
		if f.stale {
			f.msg = staleMessage(op, timeline, f.seen)
		}
		topError = f.msg
		// The page answers a POST: a reload would post it again, so the
		// script puts the operation's own address in the history instead.
		replaceURL = "/operations/" + url.PathEscape(op.Key)
	}
	var forms []decisionForm
	for _, form := range decisionForms {
		if form.Kind == opledger.DecisionCancel && !canCancel || form.Kind == opledger.DecisionMarkSucceeded && !canSucceed ||
			form.Kind == opledger.DecisionAuthorizeRetry && !canRetry {
			continue
		}
		if f != nil && f.kind == form.Kind {
			form.Values, form.Error, form.Field = f.values, f.msg, f.field
			topError = ""
		}
		forms = append(forms, form)
	}
	var approval *approvalForm
	if canApprove {
		approval = &approvalForm{}
		if f != nil && f.kind == approvedNotice {
			approval.Name, approval.Error, topError = f.values.Operator, f.msg, ""
		}
	}
	// A session that may not decide sees that a decision is wanted, and
	// why it is offered none.
	undecidable := !s.canDecide() && (len(forms) > 0 || approval != nil)
	if !s.canDecide() {
		forms, approval = nil, nil
	}
	c.renderSigned(w, s, status, "operation", map[string]any{"Title": op.Key, "Op": op, "Why": why(op, timeline),
		"Undecidable": undecidable,
		"Guidance":    guidance(op, givenUp, c.reconciled(s, op)),
		"Payload":     masked, "Attempts": shorten(attempts, shownItems), "Timeline": shorten(timeline, shownItems), "Forms": forms,
		"Approval": approval,
		"Seen":     op.UpdatedAt.UTC().Format(time.RFC3339Nano), "MaxReason": maxReasonBytes, "MaxRef": maxRefBytes,
		"MaxOperator": maxOperatorBytes, "FormError": topError, "ReplaceURL": replaceURL, "Notice": notice,
		"Workflow": map[bool]string{true: workflowKey}[isStep], "Unreconciled": c.unreconciled(s, op)})
}

// workflowCancelledAt is the timeline entry a workflow's cancellation at
// this step left on its failed operation, nil if none.
func workflowCancelledAt(timeline []*opledger.TimelineEntry) *opledger.TimelineEntry {
	for i := len(timeline) - 1; i >= 0; i-- {
		if e := timeline[i]; e.Event == "workflow cancelled" && e.To == "" {
			return e
		}
	}
	return nil
}

// why is the timeline entry that put an operation needing attention
// (held, uncertain or failed) in its state, to show at the top of its
// page: what the reconciler found, what the destination said, who
// decided. Nil for the other states, or when the timeline has none.
func why(op *opledger.Operation, timeline []*opledger.TimelineEntry) *opledger.TimelineEntry {
	switch op.State {
	case opledger.StateHeld, opledger.StateUncertain, opledger.StateFailed:
	default:
		return nil
	}
	for i := len(timeline) - 1; i >= 0; i-- {
		if timeline[i].To == op.State {
			return timeline[i]
		}
	}
	return nil
}

// stepNotRecorded answers 404 with a page that says key is a step of a
// workflow, not recorded yet (or succeeded, and its record removed by
// retention since), with a link to the workflow, when it is one, and
// reports whether it did: "No operation of tenant …" would send the
// operator looking for another tenant.
func (c *Console) stepNotRecorded(w http.ResponseWriter, r *http.Request, s *session, key string) bool {
	wkey, name, ok := opledger.SplitWorkflowStepKey(key)
	if !ok || opledger.ValidateKey(wkey) != nil {
		return false
	}
	wf, err := s.ledger.GetWorkflow(r.Context(), wkey)
	if err != nil {
		return false
	}
	st := wf.Step(name)
	if st == nil || st.Operation != nil {
		return false
	}
	step := map[string]any{"Key": key, "Name": name, "Workflow": wkey, "State": st.State}
	switch {
	case st.State == opledger.StepWaiting && st.WaitingFor != "":
		step["WaitingFor"] = st.WaitingFor
	case st.State == opledger.StepWaiting:
		step["Why"] = wf.Reason // due to be recorded, or its content cannot be filled
	case st.State == opledger.StepState(opledger.StateSucceeded):
		step["Done"], step["Why"] = true, "It succeeded; retention has removed its record since."
	case st.State == opledger.StepCancelled:
		step["Cancelled"], step["Why"] = true, wf.Reason // who cancelled the workflow, and why
	default:
		return false
	}
	c.renderSigned(w, s, http.StatusNotFound, "operation", map[string]any{"Title": key, "Step": step})
	return true
}

// missing answers 404 when err says the operation of key is not there,
// and reports whether it did. Keys are per tenant: one recorded under
// another token's tenant is not found here, so the page names the tenant.
// A key refused for its syntax is not echoed. The page links to the
// operations list, whose "Open by key" takes another try.
func (c *Console) missing(w http.ResponseWriter, r *http.Request, s *session, key string, err error) bool {
	switch {
	case errors.Is(err, opledger.ErrNotFound):
		c.failBack(w, r, s, http.StatusNotFound, "No operation of tenant "+s.tenant+" has the key "+key+".", nil, operationsBack)
	case errors.Is(err, opledger.ErrInvalidKey):
		c.failBack(w, r, s, http.StatusNotFound, "No operation has that key.", nil, operationsBack)
	default:
		return false
	}
	return true
}

// reconcilerKnows is what the console knows of a reconciler for an
// operation's destination and tenant (Options.Reconciled).
type reconcilerKnows int

const (
	// reconcilerUnknown: the console was not told (Options.Reconciled nil).
	reconcilerUnknown reconcilerKnows = iota
	// reconcilerServes: a reconciler of this process examines it.
	reconcilerServes
	// reconcilerNone: no reconciler of this process examines it.
	reconcilerNone
)

// reconciled is what the console knows of a reconciler of this process
// for op's destination and the session's tenant.
func (c *Console) reconciled(s *session, op *opledger.Operation) reconcilerKnows {
	switch {
	case c.opts.Reconciled == nil:
		return reconcilerUnknown
	case c.opts.Reconciled(s.tenant, op.Destination):
		return reconcilerServes
	}
	return reconcilerNone
}

// unreconciled reports whether op is uncertain and the console knows
// that no reconciler of this process examines it (reconcilerNone):
// nothing here will look it up. The exception queue, the operations list,
// its page and its workflow's page mark it (the "unreconciled" template). Options.Reconciled
// is asked of uncertain operations only.
func (c *Console) unreconciled(s *session, op *opledger.Operation) bool {
	return op.State == opledger.StateUncertain && !op.Tombstoned && c.reconciled(s, op) == reconcilerNone
}

// decideAfterLooking is the advice of an operation a person may settle
// by what the destination shows.
const decideAfterLooking = "if the effect is there, mark it succeeded with its reference; if you checked that it is not, authorize a retry; if it should not happen at all, cancel it."

// guidance says, above the decisions, what an operation in its state asks
// of a person; "" when the forms say enough. An uncertain one's says who
// else may settle it, by what rec says of this process's reconciler:
// only a person, when none examines it.
func guidance(op *opledger.Operation, givenUp bool, rec reconcilerKnows) template.HTML {
	switch {
	case op.Tombstoned:
		return ""
	case givenUp:
		return "Its workflow was cancelled at this step, so it is not attempted again. Mark it succeeded only if you find the effect at the destination after all."
	case op.State == opledger.StateUncertain && rec == reconcilerServes:
		return "This server’s reconciler examines it: it looks it up at the destination, or retries it under a protection the destination declares, and holds it for a person when it can do neither. You need not wait if you know what happened: " + decideAfterLooking
	case op.State == opledger.StateUncertain && rec == reconcilerNone:
		return "Nothing here will look it up: no reconciler of this server serves destination " + freeText(op.Destination) +
			" for this tenant (the server runs none, its destinations file leaves the destination out, or the destination serves other tenants only). " +
			"It stays uncertain until a person decides, unless a reconciler of another process sharing this store serves the destination. Look at the destination: " + decideAfterLooking
	case op.State == opledger.StateUncertain:
		return "A reconciler that serves its destination looks it up, or retries it under a protection the destination declares, and holds it for a person when it can do neither; without one it stays uncertain until a person decides. Look at the destination first: " + decideAfterLooking
	case op.State == opledger.StateHeld:
		return "Look at the destination first: " + decideAfterLooking
	case op.FailureKind == opledger.FailureRejected:
		return "The destination refused this content, so nothing happened there. Sent again as it is, it will most likely be refused again: authorize a retry only once the cause is repaired at the destination or in its configuration. Content that was wrong is corrected by a new operation with its own key: sent content is never changed."
	case op.FailureKind == opledger.FailureExhausted:
		return "The retry limit or deadline was reached without a settled answer. Authorize a retry once the destination works again, or mark it succeeded if you find the effect there."
	case op.FailureKind == opledger.FailureCancelled:
		return "An operator cancelled it: nothing more is needed. Authorize a retry only if it should happen after all."
	}
	return ""
}

// staleMessage says what became of an operation since a page showed it
// as updated at seen (zero: the form did not say). The newest timeline
// entry names what happened only when it came after seen: a reconciler
// that takes an uncertain operation for a lookup (Ledger.ClaimLookup)
// changes it without an entry, and the entry before it happened before
// the page was drawn.
func staleMessage(op *opledger.Operation, timeline []*opledger.TimelineEntry, seen time.Time) string {
	state := string(op.State)
	if op.FailureKind != "" {
		state += " (" + string(op.FailureKind) + ")"
	}
	what := "The operation has changed since you opened this page"
	now := ": it is now " + state
	n := len(timeline)
	switch {
	case n > 0 && (seen.IsZero() || timeline[n-1].At.After(seen)):
		last := timeline[n-1]
		if strings.HasPrefix(last.Event, "operator ") {
			what = "Another decision was recorded since you opened this page"
		}
		if last.Event == state {
			// "(succeeded, by …): it is now succeeded" says it twice.
			what, now = what+": it is now "+state, " (by "+last.Actor+")"
		} else {
			what += " (" + last.Event + ", by " + last.Actor + ")"
		}
	case !seen.IsZero() && op.State == opledger.StateUncertain:
		what = "The reconciler began looking this operation up at the destination since you opened this page"
		now = ": it is still uncertain, and the lookup's answer may settle it"
	}
	return what + now + ". Yours was not recorded. Look again before deciding."
}

// resolve records a decision taken on the operation page. The form names
// the operation's UpdatedAt as the page showed it: a decision about an
// operation that has changed since, or from a form that does not say
// (a page of an older console), is refused, not applied to a situation
// nobody looked at. A recorded decision sends the browser to the
// operation's page (Post/Redirect/Get); a refused one is shown at once,
// with the operation as it is now and what was typed.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PathValue("key")
	kind := opledger.DecisionKind(r.PostForm.Get("decision"))
	if _, ok := notices[kind]; !ok {
		c.fail(w, r, s, http.StatusBadRequest, "The console offers no such decision.", nil)
		return
	}
	v := decisionValues{Ref: r.PostForm.Get("ref"), Reason: r.PostForm.Get("reason"), Operator: r.PostForm.Get("operator")}
	seen, err := time.Parse(time.RFC3339Nano, r.PostForm.Get("seen"))
	failed := func(status int, field, msg string) {
		c.showOperation(w, r, s, &decisionFailure{status: status, kind: kind, values: v, field: field, msg: msg, seen: seen}, "")
	}
	if err != nil || seen.IsZero() {
		failed(http.StatusConflict, "", "This form does not say which version of the operation you saw (it comes from an older page of the console), so nothing was recorded. Look at the operation again before deciding.")
		return
	}
	if field, msg := checkDecision(kind, v); msg != "" {
		failed(http.StatusBadRequest, field, msg)
		return
	}
	d := opledger.Decision{
		Kind:           kind,
		DestinationRef: strings.TrimSpace(v.Ref),
		Reason:         strings.TrimSpace(v.Reason),
		Operator:       operatorName(v.Operator),
		SeenUpdatedAt:  seen,
	}
	if kind != opledger.DecisionMarkSucceeded {
		d.DestinationRef = ""
	}
	op, replayed, err := s.ledger.Resolve(r.Context(), key, d)
	var se *opledger.StateError
	switch {
	case errors.Is(err, opledger.ErrStaleDecision):
		c.showOperation(w, r, s, &decisionFailure{status: http.StatusConflict, kind: kind, values: v, stale: true, seen: seen}, "")
		return
	case errors.Is(err, opledger.ErrReasonRequired):
		failed(http.StatusBadRequest, "reason", "Write a reason: what you checked and why this decision is right.")
		return
	case errors.As(err, &se) && se.Operation != nil && se.Operation.Tombstoned:
		failed(http.StatusConflict, "", "The operation was compacted: only its tombstone is left, and no decision applies to it.")
		return
	case errors.As(err, &se):
		failed(http.StatusConflict, "", "The operation is "+string(se.State)+" now; that decision no longer applies.")
		return
	case errors.Is(err, opledger.ErrInvalidState):
		// Not a *StateError: a retry of the failed step a workflow was
		// cancelled at, which the page offers no form for.
		failed(http.StatusConflict, "", "Its workflow was cancelled at this step, so it is not attempted again: your decision was not recorded.")
		return
	case errors.Is(err, opledger.ErrInvalidInput):
		failed(http.StatusBadRequest, "", consoleWords(strings.TrimPrefix(err.Error(), "invalid input: ")))
		return
	case c.missing(w, r, s, key, err):
		return
	case errors.Is(err, opledger.ErrStoreBusy):
		c.logBusy(r, err)
		failed(http.StatusServiceUnavailable, "", storeBusyMessage)
		return
	case err != nil:
		c.fail(w, r, s, http.StatusServiceUnavailable, "The decision could not be recorded.", err)
		return
	}
	notice := string(kind)
	if replayed {
		notice = replayedNotice
	} else if kind == opledger.DecisionAuthorizeRetry && op.State == opledger.StateAwaitingApproval {
		// Its content was never approved: the retry waits for that.
		notice = retryAwaitsApprovalNotice
	} else if op.State == opledger.StateSucceeded {
		// A workflow's step that succeeded leads to its next step now, as
		// after the HTTP API's resolve, not at the next sweep.
		advance.WorkflowOf(r.Context(), s.ledger, op.Key, c.log)
	}
	c.redirectWithNotice(w, r, s, operationsPage, op.Key, notice)
}

// storeBusyMessage refuses a decision or approval the ledger did not
// record because another process held the store's lock
// (opledger.ErrStoreBusy): the page is drawn again with what was typed,
// to be sent again as it is.
const storeBusyMessage = "The ledger's store was busy (another process held its lock), so nothing was recorded. Send it again."

// logBusy logs, as a warning, a decision or approval refused with
// opledger.ErrStoreBusy, as the API logs its store_busy answers: the
// key of the page's path left out.
func (c *Console) logBusy(r *http.Request, err error) {
	c.log.Warn("console: the store was busy; nothing was recorded", "path_pattern", r.Pattern,
		"error", redact.Keys(r.PathValue("key"), err))
}

// checkDecision checks a decision form's fields as the ledger would, and
// says which is wrong in the console's words: the field ("ref", "reason"
// or "operator") and the message, or "", "" when they are fine.
func checkDecision(kind opledger.DecisionKind, v decisionValues) (field, msg string) {
	reason, ref, name := strings.TrimSpace(v.Reason), strings.TrimSpace(v.Ref), strings.TrimSpace(v.Operator)
	switch {
	case reason == "":
		return "reason", "Write a reason: what you checked and why this decision is right."
	case len(reason) > maxReasonBytes:
		return "reason", fmt.Sprintf("The reason is %d bytes long; the ledger keeps at most %d. Shorten it.", len(reason), maxReasonBytes)
	case !storable(reason):
		return "reason", "The reason holds characters the ledger cannot store (a NUL byte or invalid UTF-8)."
	}
	if kind == opledger.DecisionMarkSucceeded {
		switch {
		case ref == "":
			return "ref", "Write the reference you found at the destination: it is what shows the effect happened."
		case len(ref) > maxRefBytes:
			return "ref", fmt.Sprintf("The reference is %d bytes long; the ledger keeps at most %d.", len(ref), maxRefBytes)
		case !storable(ref):
			return "ref", "The reference holds characters the ledger cannot store (a NUL byte or invalid UTF-8)."
		}
	}
	if msg := checkName(name); msg != "" {
		return "operator", msg
	}
	return "", ""
}

// checkName says what is wrong with a name typed in a form (trimmed), in
// the console's words, or "" when the ledger can keep it.
func checkName(name string) string {
	switch {
	case len(name) > maxOperatorBytes:
		return fmt.Sprintf("Your name is %d bytes long; the ledger keeps at most %d.", len(name), maxOperatorBytes)
	case !storable(name):
		return "Your name holds characters the ledger cannot store (a NUL byte or invalid UTF-8)."
	}
	return ""
}

// storable reports whether the ledger can store s (PostgreSQL's text
// takes neither NUL bytes nor invalid UTF-8).
func storable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// operatorName is the name a decision records: the name typed, or
// "operator" when none was typed. The session's ledger adds the console
// and the token signed in with after it (sessionCredential), so a name
// typed here never passes for the reconciler, a worker or the command line.
func operatorName(typed string) string {
	if typed = strings.TrimSpace(typed); typed != "" {
		return typed
	}
	return "operator"
}

// libraryWords are the ledger's names for a decision's parts, and the
// console's.
var libraryWords = strings.NewReplacer(
	"mark_succeeded", "“Mark succeeded”",
	"authorize_retry", "“Authorize retry”",
	"destination_ref", "reference",
)

// consoleWords puts a message of the ledger in the console's words.
func consoleWords(msg string) string {
	msg = libraryWords.Replace(msg)
	if r, n := utf8.DecodeRuneInString(msg); n > 0 {
		msg = string(unicode.ToUpper(r)) + msg[n:]
	}
	return msg + "."
}
