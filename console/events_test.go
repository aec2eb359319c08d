package console_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// The events page filters by status, with each status's count, keeps the
// filter on its next page, and says so when a status has no event: a
// conflict or an unmapped event can be found without paging through
// every applied one.
func TestEventsByStatus(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	ctx := context.Background()
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: intake
    type: accepted
    operations:
      - key: "intake:{data.n}:create"
        action: crm.create
        destination: crm
`))
	require.NoError(t, err)
	for _, ev := range []opledger.Event{
		{Source: "forms", EventID: "e1", Type: "accepted", Payload: json.RawMessage(`{"n":"1"}`)},
		{Source: "forms", EventID: "e2", Type: "accepted", Payload: json.RawMessage(`{"n":"2"}`)},
		{Source: "forms", EventID: "e3", Type: "withdrawn", Payload: json.RawMessage(`{"n":"3"}`)},
	} {
		_, err := l.ReceiveEvent(ctx, rules, ev)
		require.NoError(t, err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/events")
	require.Contains(t, page, `<a href="/events" aria-current="page">all (3)</a>`)
	require.Contains(t, page, `<a href="/events?status=applied">applied (2)</a>`)
	require.Contains(t, page, `<a href="/events?status=unmapped">unmapped (1)</a>`)
	require.Contains(t, page, `<a href="/events?status=conflict">conflict (0)</a>`)

	page = s.get("/events?status=unmapped")
	require.Contains(t, page, "forms/e3")
	require.NotContains(t, page, "forms/e1")
	require.Contains(t, page, `<a href="/events?status=unmapped" aria-current="page">unmapped (1)</a>`)
	page = s.get("/events?source=forms&status=conflict")
	require.Contains(t, page, "No conflict event from")
	require.Contains(t, page, `href="/events?source=forms&amp;status=applied"`, "the filter keeps the source")

	resp, err := s.hc.Get(srv.URL + "/events?status=lost")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "There is no status “lost”. The statuses are applied, out_of_order, conflict and unmapped.")
	require.Contains(t, s.get("/events"), `<td data-label="Operations">`, "on a phone each value says what it is")
	resp, err = s.hc.Get(srv.URL + "/events?status=applied&status=unmapped")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "two statuses are not one of them, silently")
	require.False(t, strings.Contains(s.get("/events?status=applied"), "forms/e3"))
}

// A source with no event is said to have none, not taken for a ledger
// that has received no event at all: the counts above it are the
// tenant's, and say otherwise.
func TestEventsOfSourceWithNone(t *testing.T) {
	t.Parallel()
	l, token, c, _ := shiftedConsole(t, opledger.Options{})
	_, err := l.ReceiveEvent(context.Background(), nil, opledger.Event{Source: "forms", EventID: "e1", Type: "accepted",
		Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)
	page := s.get("/events?source=shop")
	require.Contains(t, page, `<p class="empty">No event from <bdi>shop</bdi>.</p>`)
	require.NotContains(t, page, "No event received yet")
	require.Contains(t, s.get("/events?source=forms&status=conflict"), `<p class="empty">No conflict event from <bdi>forms</bdi>.</p>`)
}
