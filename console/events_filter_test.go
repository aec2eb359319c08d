package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEventsBadFilterKeepsThePage: a filter the events list cannot give
// (an unknown status, two statuses or two sources, a source no event can
// have) used to be answered with a bare error page, where the operations
// list keeps its page and says what is wrong. The events page is drawn
// too (400), with its status filter, whose links lead to lists it can
// give: a source that is valid is kept, one that is not is left out.
func TestEventsBadFilterKeepsThePage(t *testing.T) {
	t.Parallel()
	l, token, srv, _ := storeConsoleOf(t, testdb.SQLiteDSN(t))
	_, err := l.ReceiveEvent(context.Background(), nil, opledger.Event{Source: "forms", EventID: "e1", Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	s := signIn(t, srv.URL, token)
	for _, tc := range []struct {
		query, says, link string
	}{
		{"status=bogus", "There is no status “bogus”. The statuses are applied, out_of_order, conflict and unmapped.",
			`<a href="/events?status=unmapped">unmapped (1)</a>`},
		{"source=forms&status=bogus", "There is no status “bogus”.", `<a href="/events?source=forms&amp;status=unmapped">unmapped</a>`},
		{"status=applied&status=conflict", "Give one status and one source at most.", `<a href="/events?status=conflict">conflict (0)</a>`},
		{"source=a&source=b", "Give one status and one source at most.", `<a href="/events?status=unmapped">unmapped (1)</a>`},
		{"source=%00forms", "The source holds characters the ledger cannot store (a NUL byte or invalid UTF-8), so no event has it.",
			`<a href="/events?status=unmapped">unmapped (1)</a>`},
		{"source=%FF", "The source holds characters", `<a href="/events?status=unmapped">unmapped (1)</a>`},
	} {
		status, page := s.fetch("/events?" + tc.query)
		require.Equal(t, http.StatusBadRequest, status, tc.query)
		require.Contains(t, page, `<h1>Events</h1>`, "%s: the events page", tc.query)
		require.Regexp(t, `<p class="error" role="alert" id="list-error">[^<]*`+regexp.QuoteMeta(tc.says), page, tc.query)
		require.Contains(t, page, `<nav class="status-filter" aria-label="Events by status">`, "%s: the filter", tc.query)
		require.Contains(t, page, tc.link, "%s: its links lead to lists the page can give", tc.query)
		require.NotContains(t, page, `id="first-page"`, "%s: no page link: the filter is wrong, not the page", tc.query)
		require.NotContains(t, page, "<table", "%s: no list under a filter it cannot give", tc.query)
	}
}
