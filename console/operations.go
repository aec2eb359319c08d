package console

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/opledger/opledger"
)

// operationsPageSize is how many operations a page of the operations list
// shows.
const operationsPageSize = 100

// operationsFilter is what the operations list was asked for.
type operationsFilter struct {
	States             []opledger.State
	Owner, Destination string
	// ExceptCancelled leaves out the failed operations that need no
	// decision (opledger.ListOptions.ExceptCancelled): the exception
	// queue's link to every failed one it counts asks for it.
	ExceptCancelled bool
	Cursor          string
}

// query is the filter as a query string, with cursor in place of its own
// ("" for the first page).
func (f operationsFilter) query(cursor string) string {
	v := url.Values{}
	if len(f.States) > 0 {
		v.Set("state", f.StateValue())
	}
	if f.Owner != "" {
		v.Set("owner", f.Owner)
	}
	if f.Destination != "" {
		v.Set("destination", f.Destination)
	}
	if f.ExceptCancelled {
		v.Set("except_cancelled", "true")
	}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	return v.Encode()
}

// StateValue is the filter's states as the state field gives them:
// comma-separated.
func (f operationsFilter) StateValue() string {
	names := make([]string, len(f.States))
	for i, st := range f.States {
		names[i] = string(st)
	}
	return strings.Join(names, ",")
}

// operationRow is an operation of the operations list, its times as ages
// by the ledger's clock, with the exact times (ageElement).
type operationRow struct {
	*opledger.Operation
	Age, Updated template.HTML
	// Unreconciled marks an uncertain operation that no reconciler of
	// this process examines, as the exception queue does.
	Unreconciled bool
}

// parseOperationsFilter reads the filter of the operations list from the
// query: state (one or several, repeated or comma-separated), owner,
// destination, except_cancelled, cursor. It returns the message to show
// when the query asks for something the list cannot give.
func parseOperationsFilter(q url.Values) (operationsFilter, string) {
	f := operationsFilter{Owner: q.Get("owner"), Destination: q.Get("destination"), Cursor: q.Get("cursor")}
	if v := q.Get("except_cancelled"); v != "" {
		except, err := strconv.ParseBool(v)
		if err != nil {
			return f, "except_cancelled is true or false, not “" + visibleText(v) + "”."
		}
		f.ExceptCancelled = except
	}
	seen := map[opledger.State]bool{}
	for _, v := range q["state"] {
		for name := range strings.SplitSeq(v, ",") {
			st := opledger.State(strings.TrimSpace(name))
			switch {
			case st == "" || seen[st]:
				continue
			case !st.Valid():
				return f, "There is no state “" + visibleText(string(st)) + "”. The states are " + opledger.StateNames() + "."
			}
			seen[st] = true
			f.States = append(f.States, st)
		}
	}
	for _, field := range []struct{ name, value string }{{"owner", f.Owner}, {"destination", f.Destination}} {
		if !storable(field.value) {
			return f, "The " + field.name + " holds characters the ledger cannot store (a NUL byte or invalid UTF-8), so no operation has it."
		}
	}
	return f, ""
}

// operations lists the tenant's operations, newest first (by creation),
// filtered by state, owner and destination, a page at a time: the whole
// ledger, where the exception queue shows only what needs attention. It
// shows no payload.
func (c *Console) operations(w http.ResponseWriter, r *http.Request, s *session) {
	// The page's "Open by key" form: the operation's own page says
	// whether it exists.
	if key := strings.TrimSpace(r.URL.Query().Get("key")); key != "" {
		http.Redirect(w, r, "/operations/"+url.PathEscape(key), http.StatusSeeOther)
		return
	}
	f, msg := parseOperationsFilter(r.URL.Query())
	data := map[string]any{"Title": "Operations", "Filter": f, "States": opledger.States,
		"PageSize": c.pageSize}
	if msg != "" {
		data["Error"] = msg
		c.renderSigned(w, s, http.StatusBadRequest, "operations", data)
		return
	}
	page, err := s.ledger.List(r.Context(), opledger.ListOptions{States: f.States, Owner: f.Owner, Destination: f.Destination,
		ExceptCancelled: f.ExceptCancelled, Limit: c.pageSize, Cursor: f.Cursor})
	if errors.Is(err, opledger.ErrInvalidInput) {
		// The filters were checked above: what is left is the cursor.
		data["Error"] = "That page link does not continue this list: it belongs to other filters, or was not made by the console. Start again from the first page."
		if f.Cursor == "" {
			data["Error"] = consoleWords(strings.TrimPrefix(err.Error(), "invalid input: "))
		}
		data["First"] = "/operations?" + f.query("")
		c.renderSigned(w, s, http.StatusBadRequest, "operations", data)
		return
	}
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	// Their ages are measured against the ledger's clock as the page was
	// read, in the same read (opledger.Page.Now).
	now := page.Now
	rows := make([]operationRow, len(page.Items))
	unreconciled := false
	for i, op := range page.Items {
		rows[i] = operationRow{Operation: op, Age: ageElement(now, op.CreatedAt), Updated: ageElement(now, op.UpdatedAt),
			Unreconciled: c.unreconciled(s, op)}
		unreconciled = unreconciled || rows[i].Unreconciled
	}
	data["Items"], data["Unreconciled"] = rows, unreconciled
	if page.NextCursor != "" {
		data["Next"] = "/operations?" + f.query(page.NextCursor)
	}
	if f.Cursor != "" {
		data["First"] = "/operations?" + f.query("")
	}
	// Without an owner or destination, the counts by state say how many
	// match in all.
	if f.Owner == "" && f.Destination == "" {
		counts, err := s.ledger.CountByState(r.Context())
		if err != nil {
			c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
			return
		}
		if f.ExceptCancelled {
			if counts[opledger.StateFailed], err = s.ledger.CountFailedNeedingDecision(r.Context()); err != nil {
				c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
				return
			}
		}
		total := 0
		for _, st := range opledger.States {
			if len(f.States) == 0 || slices.Contains(f.States, st) {
				total += counts[st]
			}
		}
		data["Total"] = total
	}
	c.renderSigned(w, s, http.StatusOK, "operations", data)
}
