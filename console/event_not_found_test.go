package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestUnknownEventLinksToEvents: the page of an event that is not there
// (a mistyped id, one of another tenant, or an address whose "/" names
// none) linked only to the exception queue, where the operator came from
// the events list and wants to go back to it: it links to the events list
// too.
func TestUnknownEventLinksToEvents(t *testing.T) {
	t.Parallel()
	l, token, srv, _ := storeConsoleOf(t, testdb.SQLiteDSN(t))
	_, err := l.ReceiveEvent(context.Background(), nil, opledger.Event{Source: "forms", EventID: "e1", Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	s := signIn(t, srv.URL, token)
	for _, path := range []string{"/events/forms/e2", "/events/shop/e1", "/events/forms/e1/more", "/events/forms%00/e1"} {
		status, page := s.fetch(path)
		require.Equal(t, http.StatusNotFound, status, path)
		require.Contains(t, page, "No event has that source and id.", path)
		require.Contains(t, page, `<a href="/events">Back to the events</a>`, path)
		require.Contains(t, page, `<a href="/">Back to the exception queue</a>`, path)
	}
	require.NotContains(t, s.get("/events/forms/e1"), "Back to the events", "an event that is there links to the list as it did")
}
