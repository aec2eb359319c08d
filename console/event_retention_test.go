package console_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// An event whose earliest deliveries retention removed (received more
// than its period ago) says so on its page, rather than counting the
// deliveries kept as all of them: delivered three times, two of them
// removed, it is not "1 delivery, 1 of them duplicate".
func TestEventDeliveriesRemovedOnRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Retention: time.Hour})
	receive := func(id, delivery string) {
		t.Helper()
		_, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: id, DeliveryID: delivery, Type: "t", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	receive("evt-1", "d1")
	receive("evt-1", "d2")
	receive("evt-2", "d1")
	offset.Add(int64(2 * time.Hour))
	receive("evt-1", "d3")
	receive("evt-3", "d1")
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, res.DeliveriesCompacted)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/events/forms/evt-1")
	require.NotContains(t, page, "1 delivery, 1 of them duplicate", "not every delivery")
	require.Contains(t, page, "The earliest deliveries, received more than the retention period ago, were removed on retention (the counts of the events page keep them); 1 later delivery is kept, 1 of them duplicate (recorded, never acted on again).")
	page = s.get("/events/forms/evt-2")
	require.Contains(t, page, "were removed on retention (the counts of the events page keep them); 0 later deliveries are kept, 0 of them duplicates")
	require.Contains(t, s.get("/events/forms/evt-3"), `<p id="deliveries-summary">1 delivery, 0 of them duplicates (recorded, never acted on again).`, "all kept: counted as they are")
	require.Contains(t, s.get("/events"), "3 events, 5 deliveries, 2 of them duplicates", "the events page counts them all")
}

// TestEventsCountsAfterForgetting: once retention has forgotten events
// (TombstoneRetention after they were received), the events page's status
// links count the events it still lists, not those forgotten: two of three
// events forgotten, "all" is "all (1)" with the one event listed, and the
// page still says how many were received in all.
func TestEventsCountsAfterForgetting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, token, c, offset := shiftedConsole(t, opledger.Options{Retention: time.Hour, TombstoneRetention: 2 * time.Hour})
	receive := func(id string) {
		t.Helper()
		_, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: id, Type: "t", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	receive("evt-1")
	receive("evt-2")
	offset.Add(int64(3 * time.Hour))
	receive("evt-3")
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.EventsForgotten)
	srv := httptest.NewServer(c)
	defer srv.Close()
	s := signIn(t, srv.URL, token)

	page := s.get("/events")
	require.Contains(t, page, "forms/evt-3")
	require.NotContains(t, page, "forms/evt-1")
	require.Contains(t, page, `<a href="/events" aria-current="page">all (1)</a>`, "the events listed")
	require.Contains(t, page, `<a href="/events?status=unmapped">unmapped (1)</a>`)
	require.Contains(t, page, "1 event kept. Received in all, those forgotten on retention included: 3 events, 3 deliveries")
	require.Contains(t, s.get("/dashboard"), `<span class="n">3</span><span class="l">events received (1 kept)</span>`)
}
