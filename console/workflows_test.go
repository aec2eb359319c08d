package console_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// secretEmail is the sensitive field of every workflow step the tests of
// the workflows list record: no page of the list may show it.
const secretEmail = "ana@example.invalid"

// putWorkflow records a one-step workflow whose step's payload holds
// secretEmail as a sensitive field, and settles its step: outcome
// succeeded or rejected reports it so, uncertain leaves it held (with
// evidence), "" leaves it pending.
func putWorkflow(t *testing.T, l *opledger.Ledger, key string, outcome opledger.Outcome, evidence string) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Owner: "onboarding-team", Steps: []opledger.WorkflowStep{
		{Name: "send", Action: "mail.send", Destination: "mail", SensitiveFields: []string{"to"},
			Payload: json.RawMessage(`{"to":"` + secretEmail + `"}`)}}})
	require.NoError(t, err)
	if outcome == "" {
		return
	}
	step := key + "/send"
	cl, err := l.Claim(ctx, step, opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	rep := opledger.Report{Outcome: outcome, Error: "422 no such mailbox"}
	if outcome == opledger.OutcomeSucceeded {
		rep = opledger.Report{Outcome: outcome, DestinationRef: "M-" + key}
	}
	_, err = l.Report(ctx, step, cl.AttemptID, cl.FencingToken, rep)
	require.NoError(t, err)
	if outcome == opledger.OutcomeUncertain {
		_, _, err = l.Reconcile(ctx, step, opledger.Finding{Evidence: evidence})
		require.NoError(t, err)
	}
}

// listedWorkflows are the keys a page of the workflows list shows, in
// its order.
func listedWorkflows(page string) []string {
	keys := []string{}
	for _, m := range regexp.MustCompile(`<th scope="row"><a href="/workflows/[^"]+">([^<]+)</a></th>`).FindAllStringSubmatch(page, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

// nextPage is the page's "Next workflows" link, "" on the last page.
func nextPage(page string) string {
	m := regexp.MustCompile(`<a href="([^"]+)" id="next-page">`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// The workflows list shows the open workflows by default, every one with
// open=false, those of a key prefix with prefix=, each row with its
// status, current step, steps done, reason (shortened), owner and last
// change, its
// cells labelled for a phone, and never a step's payload.
func TestWorkflowsList(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	long := "the mail provider offers no lookup by message; " + strings.Repeat("ask the recipient whether it arrived, ", 5)
	putWorkflow(t, l, "onb:1", "", "")
	putWorkflow(t, l, "onb:2", opledger.OutcomeRejected, "")
	putWorkflow(t, l, "onb:3", opledger.OutcomeSucceeded, "")
	putWorkflow(t, l, "pay:1", opledger.OutcomeUncertain, long)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/workflows")
	require.Equal(t, []string{"onb:1", "onb:2", "pay:1"}, listedWorkflows(page), "the open ones, by key")
	require.Contains(t, page, `<a href="/workflows" aria-current="page" id="show-open">open</a>`)
	require.Contains(t, page, `<a href="/workflows?open=false" id="show-all">`)
	require.Contains(t, page, `<td data-label="Status"><span class="badge">failed</span></td>`)
	require.Contains(t, page, `<td data-label="Current step"><bdi>send</bdi></td>`)
	require.Contains(t, page, `<td data-label="Owner"><bdi>onboarding-team</bdi></td>`)
	require.Regexp(t, `<td data-label="Updated"><time datetime="[^"]+Z" title="[^"]+ UTC">just now</time></td>`, page)
	require.Contains(t, page, `<td data-label="Reason"><bdi>step send failed (rejected): 422 no such mailbox</bdi></td>`)
	wf, err := l.GetWorkflow(context.Background(), "pay:1")
	require.NoError(t, err)
	require.Greater(t, len([]rune(wf.Reason)), 120, "a reason long enough to be shortened")
	reason := regexpFind(t, `<td data-label="Reason"><bdi>(step send is held[^<]*)</bdi>`, page)
	require.LessOrEqual(t, len([]rune(reason)), 120, "the list shortens a long reason")
	require.Greater(t, len([]rune(reason)), 100)
	require.True(t, strings.HasSuffix(reason, "…"))
	require.True(t, strings.HasPrefix(wf.Reason, strings.TrimSuffix(reason, "…")))
	require.Contains(t, s.get("/workflows/pay:1"), html.EscapeString(wf.Reason), "the workflow's page shows it whole")
	require.Contains(t, page, `id="wfkey"`, "the page still opens a workflow by its key")

	all := s.get("/workflows?open=false")
	require.Equal(t, []string{"onb:1", "onb:2", "onb:3", "pay:1"}, listedWorkflows(all), "finished ones too")
	require.Contains(t, all, `<td data-label="Status"><span class="badge">succeeded</span></td>`)
	require.Contains(t, all, `<td data-label="Current step"><bdi>-</bdi></td>`, "a finished workflow has no current step")
	require.Contains(t, all, `<td data-label="Steps done">1/1</td>`, "onb:3's one step succeeded")
	require.Contains(t, page, `<td data-label="Steps done">0/1</td>`)
	require.Contains(t, all, `<a href="/workflows?open=false" aria-current="page" id="show-all">`)
	require.Contains(t, all, `<input type="hidden" name="open" value="false">`, "the prefix filter keeps showing all")
	require.Equal(t, listedWorkflows(page), listedWorkflows(s.get("/workflows?open=true")), "open=true is the default")

	onb := s.get("/workflows?prefix=onb:")
	require.Equal(t, []string{"onb:1", "onb:2"}, listedWorkflows(onb))
	require.Contains(t, onb, `value="onb:"`, "the field shows the prefix")
	require.Contains(t, onb, `<a href="/workflows?open=false&amp;prefix=onb%3A" id="show-all">`, "the toggle keeps the prefix")
	require.Equal(t, []string{"onb:1", "onb:2", "onb:3"}, listedWorkflows(s.get("/workflows?prefix=onb:&open=false")))

	none := s.get("/workflows?prefix=zz")
	require.Empty(t, listedWorkflows(none))
	require.Contains(t, none, `<p class="empty">No open workflow whose key starts with <bdi>zz</bdi>.</p>`)
	require.Contains(t, s.get("/workflows?prefix=zz&open=false"), `<p class="empty">No workflow whose key starts with <bdi>zz</bdi> yet.</p>`)
	// A prefix no key can have is refused, and not written back into
	// the UTF-8 page.
	for _, raw := range []string{"%ff", "%00"} {
		code, body := s.fetch("/workflows?prefix=" + raw)
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, body, "The prefix holds characters no workflow key can have (a NUL byte or invalid UTF-8).")
		require.True(t, utf8.ValidString(body), "the page stays UTF-8")
		require.NotContains(t, body, "\x00")
	}

	for _, p := range []string{page, all, onb, none} {
		require.NotContains(t, p, secretEmail)
		require.NotContains(t, p, "ana@")
		require.NotContains(t, p, "mail.send", "the list shows no step")
	}
}

// The workflows list pages by its next link, keeping the filters: every
// workflow once, in key order, open or all; a page of the open ones can
// hold fewer than the page size (even none) and still lead on.
func TestWorkflowsPaging(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	c.SetWorkflowsPageSize(2)
	var open, every []string
	for i, key := range []string{"wf:a", "wf:b", "wf:c", "wf:d", "wf:e", "wf:f", "wf:g"} {
		outcome := opledger.Outcome("")
		if i >= 2 && i <= 4 {
			outcome = opledger.OutcomeSucceeded // c, d, e: a page of the open list holds none of them
		} else {
			open = append(open, key)
		}
		putWorkflow(t, l, key, outcome, "")
		every = append(every, key)
	}
	putWorkflow(t, l, "other:1", "", "")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	for _, tc := range []struct {
		first string
		want  []string
		pages int
	}{
		{"/workflows?prefix=wf:", open, 4},
		{"/workflows?prefix=wf:&open=false", every, 4},
	} {
		var seen []string
		path, pages := tc.first, 0
		for path != "" {
			page := s.get(path)
			pages++
			require.LessOrEqual(t, pages, 10, "the next links end")
			keys := listedWorkflows(page)
			require.LessOrEqual(t, len(keys), 2, path)
			seen = append(seen, keys...)
			if pages > 1 {
				require.Contains(t, page, "← First page", path)
			}
			path = nextPage(page)
			if path != "" {
				require.Contains(t, path, "prefix=wf%3A", "the next page keeps the prefix")
				require.Equal(t, strings.Contains(tc.first, "open=false"), strings.Contains(path, "open=false"), "the next page keeps the open filter")
			}
		}
		require.Equal(t, tc.want, seen, "%s: every workflow once, in key order", tc.first)
		require.Equal(t, tc.pages, pages, tc.first)
	}
}

// A prefix no key can start with, a cursor of another list (or none of
// the console's), a repeated parameter and an open that is neither true
// nor false are refused with a message on the page (400), never a
// server error or a silently empty list; a key that no workflow has is
// said so.
func TestWorkflowsBadInput(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	c.SetWorkflowsPageSize(1)
	putWorkflow(t, l, "wf:1", "", "")
	putWorkflow(t, l, "wf:2", opledger.OutcomeSucceeded, "")
	putWorkflow(t, l, "wf:3", "", "")
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	cursor := regexpFind(t, `cursor=([^&"]+)`, nextPage(s.get("/workflows")))
	for _, tc := range []struct{ path, msg string }{
		{"/workflows?prefix=-x", "No workflow key can start with “-x”: a key must start with a letter or digit."},
		{"/workflows?prefix=ana@example", "No workflow key can start with “ana@example”: keys must carry no personal data"},
		{"/workflows?prefix=a%20b", "No workflow key can start with “a b”: a key may contain only letters, digits"},
		{"/workflows?open=false&cursor=" + cursor, "That page link does not continue this list"},
		{"/workflows?prefix=wf&cursor=" + cursor, "That page link does not continue this list"},
		{"/workflows?cursor=bm90LWEtY3Vyc29y", "That page link does not continue this list"},
		{"/workflows?prefix=wf:&prefix=other", "Give one prefix, one open and one cursor at most."},
		{"/workflows?open=true&open=false", "Give one prefix, one open and one cursor at most."},
		{"/workflows?cursor=" + cursor + "&cursor=" + cursor, "Give one prefix, one open and one cursor at most."},
		{"/workflows?open=maybe", "Open is true (the workflows not finished) or false (every workflow), not “maybe”."},
	} {
		status, page := s.fetch(tc.path)
		require.Equal(t, http.StatusBadRequest, status, tc.path)
		require.Contains(t, html.UnescapeString(page), tc.msg, tc.path)
		require.Contains(t, page, `id="filter-error"`, tc.path)
		require.Empty(t, listedWorkflows(page), tc.path)
		require.NotContains(t, page, `class="empty"`, "%s: no empty list in place of the message", tc.path)
	}
	_, page := s.fetch("/workflows?open=false&cursor=" + cursor)
	require.Contains(t, page, `<a href="/workflows?open=false">First page of this list</a>`)
	// In its own list the cursor continues: past wf:2, which succeeded
	// since it was last advanced, and so is left out of its page.
	page = s.get("/workflows?cursor=" + cursor)
	require.Empty(t, listedWorkflows(page))
	require.Contains(t, page, `<p class="empty">No open workflow on this page.</p>`)
	require.Equal(t, []string{"wf:3"}, listedWorkflows(s.get(nextPage(page))), "an empty page still leads on")

	status, page := s.fetch("/workflows/nope:1")
	require.Equal(t, http.StatusNotFound, status)
	require.Contains(t, page, "No workflow has that key.")
	require.Contains(t, page, `id="wfkey"`)

	resp, err := s.hc.Get(srv.URL + "/workflows?key=+wf:1+")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/workflows/wf:1", resp.Header.Get("Location"), "the form opens a workflow by its key")
}
