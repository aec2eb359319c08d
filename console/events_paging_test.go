package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEventsPagesLeadBackToTheFirst: a later page of the events list
// links back to its first page, with the same filter, as the operations
// and workflows lists do, and says it is a later page; a page link that
// does not continue the list is answered on the events page, with that
// link, not with a bare error page. On both stores.
func TestEventsPagesLeadBackToTheFirst(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, token, srv, c := storeConsoleOf(t, st.NewDSN(t))
			c.SetEventsPageSize(2)
			for i := range 5 {
				_, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: fmt.Sprintf("e%d", i), Type: "t", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			}
			s := signIn(t, srv.URL, token)
			page := s.get("/events?source=forms")
			require.NotContains(t, page, "First page", "the first page")
			next := regexp.MustCompile(`href="(/events\?[^"]*cursor=[^"]+)"`).FindStringSubmatch(page)
			require.Len(t, next, 2)
			page = s.get(html.UnescapeString(next[1]))
			require.Contains(t, page, `<a href="/events?source=forms" id="first-page">← First page</a>`)
			require.Contains(t, page, "A later page")

			status, body := s.fetch("/events?source=forms&cursor=not-a-cursor")
			require.Equal(t, http.StatusBadRequest, status)
			require.Contains(t, body, `<h1>Events</h1>`, "the events page, its filters kept")
			require.Contains(t, body, `<a href="/events?source=forms" id="first-page">← First page</a>`)
		})
	}
}
