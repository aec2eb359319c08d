package console

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

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
	Done, Steps    int
	Owner, Updated string
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
	now, err := s.ledger.Now(r.Context())
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	rows := make([]workflowRow, len(page.Items))
	for i, wf := range page.Items {
		rows[i] = workflowRow{Key: wf.Key, Status: wf.Status, CurrentStep: wf.CurrentStep, Reason: clip(wf.Reason, reasonRunes),
			Steps: len(wf.Steps), Owner: wf.Owner, Updated: ago(now, wf.UpdatedAt)}
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
