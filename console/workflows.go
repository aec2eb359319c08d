package console

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger"
)

// workflowsPageSize is how many workflows a page of the workflows list
// shows (ListWorkflows' default).
const workflowsPageSize = 50

// reasonRunes bounds the reason a row of the workflows list shows; the
// workflow's page shows it whole.
const reasonRunes = 120

// workflowRow is a workflow of the workflows list: what the row shows,
// and nothing of its steps (no payload, no reference).
type workflowRow struct {
	Key                 string
	Status              opledger.WorkflowStatus
	CurrentStep, Reason string
	// Done counts the steps that succeeded, of Steps.
	Done, Steps int
	Owner       string
	// Updated is the age of the workflow's last change, with the exact
	// time (ageElement).
	Updated template.HTML
}

// workflows lists the tenant's workflows by key, the open ones unless
// open=false, filtered by key prefix, a page at a time; its form opens a
// workflow by its key. It shows no step and no payload.
func (c *Console) workflows(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	// The page's "Open by key" form: the workflow's own page says whether
	// it exists.
	if key := strings.TrimSpace(q.Get("key")); key != "" {
		http.Redirect(w, r, "/workflows/"+url.PathEscape(key), http.StatusSeeOther)
		return
	}
	prefix, cursor := strings.TrimSpace(q.Get("prefix")), q.Get("cursor")
	data := map[string]any{"Title": "Workflows", "Prefix": prefix, "Open": true,
		"PageSize": c.workflowsPageSize}
	// The filter links and the next page keep the prefix (and the next
	// page the open filter); open is the default, so only open=false is
	// written.
	href := func(open bool, cursor string) string {
		all := ""
		if !open {
			all = "false"
		}
		return listHref("/workflows", map[string]string{"prefix": prefix, "open": all, "cursor": cursor})
	}
	data["OpenHref"], data["AllHref"] = href(true, ""), href(false, "")
	bad := func(msg string) {
		data["Error"] = msg
		c.renderSigned(w, s, http.StatusBadRequest, "workflows", data)
	}
	if len(q["prefix"]) > 1 || len(q["open"]) > 1 || len(q["cursor"]) > 1 {
		bad("Give one prefix, one open and one cursor at most.")
		return
	}
	open := true
	if v := q.Get("open"); v != "" {
		var err error
		if open, err = strconv.ParseBool(v); err != nil {
			bad("Open is true (the workflows not finished) or false (every workflow), not “" + visibleText(v) + "”.")
			return
		}
	}
	data["Open"] = open
	if !storable(prefix) {
		// Not shown back either: the page is UTF-8.
		data["Prefix"] = ""
		bad("The prefix holds characters no workflow key can have (a NUL byte or invalid UTF-8).")
		return
	}
	page, err := s.ledger.ListWorkflows(r.Context(), opledger.WorkflowListOptions{Prefix: prefix, Open: open,
		Limit: c.workflowsPageSize, Cursor: cursor})
	switch {
	case errors.Is(err, opledger.ErrInvalidKey):
		msg := "No workflow key can start with “" + visibleText(prefix) + "”"
		if keyErr := (*opledger.KeyError)(nil); errors.As(err, &keyErr) {
			reason := keyErr.Reason
			if strings.HasPrefix(reason, "key ") {
				reason = "a " + reason
			}
			msg += ": " + reason
		}
		bad(msg + ".")
		return
	case errors.Is(err, opledger.ErrInvalidInput) && cursor != "":
		data["First"] = href(open, "")
		bad("That page link does not continue this list: it belongs to other filters, or was not made by the console. Start again from the first page.")
		return
	case errors.Is(err, opledger.ErrInvalidInput):
		bad(consoleWords(strings.TrimPrefix(err.Error(), "invalid input: ")))
		return
	case err != nil:
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	now := page.Now // the ledger's clock as the page was read (opledger.WorkflowPage.Now)
	rows := make([]workflowRow, len(page.Items))
	for i, wf := range page.Items {
		rows[i] = workflowRow{Key: wf.Key, Status: wf.Status, CurrentStep: wf.CurrentStep, Reason: clip(wf.Reason, reasonRunes),
			Steps: len(wf.Steps), Owner: wf.Owner, Updated: ageElement(now, wf.UpdatedAt)}
		for _, st := range wf.Steps {
			if st.State == opledger.StepState(opledger.StateSucceeded) {
				rows[i].Done++
			}
		}
	}
	data["Items"] = rows
	if page.NextCursor != "" {
		data["Next"] = href(open, page.NextCursor)
	}
	if cursor != "" {
		data["First"] = href(open, "")
	}
	c.renderSigned(w, s, http.StatusOK, "workflows", data)
}

// workflowCancelledNotice is the notice's name for a workflow cancelled
// on its page.
const workflowCancelledNotice = "workflow_cancelled"

// workflowCancelForm is the workflow page's cancel form, shown while the
// workflow can be cancelled: what was typed, why it was refused and which
// field ("reason", "operator") the refusal is about, when one was.
type workflowCancelForm struct {
	Values       decisionValues
	Error, Field string
}

// workflowCancelFailure is a cancellation the console did not record, to
// show with the workflow as it is now.
type workflowCancelFailure struct {
	status int
	values decisionValues
	field  string
	msg    string
	// seen is the workflow's UpdatedAt as the posted page showed it (zero
	// when the form did not say): a refusal for any other reason is shown
	// as stale when the workflow has changed since.
	seen time.Time
}

// cancellable reports whether CancelWorkflow takes wf: not finished, and
// its current step has no operation (stuck, or due to be recorded) or
// one that failed.
func cancellable(wf *opledger.Workflow) bool {
	if wf.Cancelled != nil || wf.Status == opledger.WorkflowSucceeded || wf.Status == opledger.WorkflowCancelled {
		return false
	}
	st := wf.Step(wf.CurrentStep)
	return st != nil && (st.Operation == nil || st.Operation.State == opledger.StateFailed)
}

// workflow shows a workflow, with the notice of its cancellation just
// recorded, if any.
func (c *Console) workflow(w http.ResponseWriter, r *http.Request, s *session) {
	notice := ""
	switch c.takeNotice(w, r, s, workflowsPage) {
	case workflowCancelledNotice:
		notice = "Recorded: the workflow is cancelled. Its steps not recorded yet are never recorded."
	case replayedNotice:
		notice = noticeText(replayedNotice, nil)
	}
	c.showWorkflow(w, r, s, nil, notice)
}

// showWorkflow renders the workflow page: with a refused cancellation f,
// in f's status, the refusal inside the cancel form (or above the steps
// when the workflow can no longer be cancelled) and what was typed.
func (c *Console) showWorkflow(w http.ResponseWriter, r *http.Request, s *session, f *workflowCancelFailure, notice string) {
	wf, err := s.ledger.GetWorkflow(r.Context(), r.PathValue("key"))
	if errors.Is(err, opledger.ErrNotFound) || errors.Is(err, opledger.ErrInvalidKey) {
		c.renderSigned(w, s, http.StatusNotFound, "workflows", map[string]any{"Title": "Workflows",
			"Missing": r.PathValue("key"), "Open": true, "PageSize": c.workflowsPageSize})
		return
	}
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	canCancel := cancellable(wf)
	unreconciled := map[string]bool{} // by step key, as the exception queue marks them
	for _, st := range wf.Steps {
		if st.Operation != nil {
			st.Operation = st.Operation.Masked() // as the API shows it
			unreconciled[st.Key] = c.unreconciled(s, st.Operation)
		}
	}
	status, topError, replaceURL := http.StatusOK, "", ""
	var form *workflowCancelForm
	if canCancel {
		form = &workflowCancelForm{}
	}
	if f != nil {
		if !f.seen.IsZero() && !f.seen.Equal(wf.UpdatedAt) {
			f.status, f.field, f.msg = http.StatusConflict, "", workflowStaleMessage(wf)
		}
		status, topError = f.status, f.msg
		if form != nil {
			form.Values, form.Error, form.Field, topError = f.values, f.msg, f.field, ""
		}
		// The page answers a POST: a reload would post it again, so the
		// script puts the workflow's own address in the history instead.
		replaceURL = "/workflows/" + url.PathEscape(wf.Key)
	}
	undecidable := !s.canDecide() && form != nil
	if !s.canDecide() {
		form = nil
	}
	c.renderSigned(w, s, status, "workflow", map[string]any{"Title": wf.Key, "W": wf, "Cancel": form,
		"Undecidable": undecidable, "Seen": wf.UpdatedAt.UTC().Format(time.RFC3339Nano),
		"MaxReason": maxReasonBytes, "MaxOperator": maxOperatorBytes, "FormError": topError,
		"ReplaceURL": replaceURL, "Notice": notice, "Unreconciled": unreconciled})
}

// workflowStaleMessage says what became of a workflow since a page
// showed it.
func workflowStaleMessage(wf *opledger.Workflow) string {
	if c := wf.Cancelled; c != nil {
		return "The workflow was cancelled since you opened this page, by " + c.Operator + " at step " + c.Step +
			": " + c.Reason + ". Yours was not recorded."
	}
	now := string(wf.Status)
	if wf.CurrentStep != "" {
		now += ", at step " + wf.CurrentStep
	}
	return "The workflow has changed since you opened this page: it is now " + now + ". Yours was not recorded. Look again before deciding."
}

// cancelWorkflow records the cancellation of a workflow given on its
// page. The form names the workflow's UpdatedAt as the page showed it: a
// workflow that has changed since, or a form that does not say, is
// refused. A recorded cancellation, or one sent twice, sends the browser
// to the workflow's page with its notice (Post/Redirect/Get); a refused
// one is shown at once, with the workflow as it is now and what was
// typed.
func (c *Console) cancelWorkflow(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PathValue("key")
	v := decisionValues{Reason: r.PostForm.Get("reason"), Operator: r.PostForm.Get("operator")}
	seen, err := time.Parse(time.RFC3339Nano, r.PostForm.Get("seen"))
	failed := func(status int, field, msg string) {
		c.showWorkflow(w, r, s, &workflowCancelFailure{status: status, values: v, field: field, msg: msg, seen: seen}, "")
	}
	if err != nil || seen.IsZero() {
		failed(http.StatusConflict, "", "This form does not say which version of the workflow you saw (it comes from an older page of the console), so nothing was recorded. Look at the workflow again before deciding.")
		return
	}
	if field, msg := checkDecision(opledger.DecisionCancel, v); msg != "" {
		failed(http.StatusBadRequest, field, msg)
		return
	}
	wf, replayed, err := s.ledger.CancelWorkflow(r.Context(), key, opledger.WorkflowCancel{
		Reason: strings.TrimSpace(v.Reason), Operator: operatorName(v.Operator), SeenUpdatedAt: seen})
	switch {
	case errors.Is(err, opledger.ErrStaleDecision):
		// Shown as stale: the workflow as it is now differs from seen.
		failed(http.StatusConflict, "", "The workflow has changed since you opened this page. Yours was not recorded. Look again before deciding.")
		return
	case errors.Is(err, opledger.ErrReasonRequired):
		failed(http.StatusBadRequest, "reason", "Write a reason: what you checked and why this decision is right.")
		return
	case errors.Is(err, opledger.ErrInvalidState):
		failed(http.StatusConflict, "", "This workflow cannot be cancelled now (it is finished, or its current step's operation has not finished: cancel or settle that operation first). Yours was not recorded.")
		return
	case errors.Is(err, opledger.ErrInvalidInput):
		failed(http.StatusBadRequest, "", consoleWords(strings.TrimPrefix(err.Error(), "invalid input: ")))
		return
	case errors.Is(err, opledger.ErrNotFound) || errors.Is(err, opledger.ErrInvalidKey):
		c.showWorkflow(w, r, s, nil, "")
		return
	case errors.Is(err, opledger.ErrStoreBusy):
		c.logBusy(r, err)
		failed(http.StatusServiceUnavailable, "", storeBusyMessage)
		return
	case err != nil:
		c.fail(w, r, s, http.StatusServiceUnavailable, "The cancellation could not be recorded.", err)
		return
	}
	notice := workflowCancelledNotice
	if replayed {
		notice = replayedNotice
	}
	c.redirectWithNotice(w, r, s, workflowsPage, wf.Key, notice)
}
