package console_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEventsCountsOfOneSource: the counts of the events page are the
// tenant's, of every source (as /v1/stats gives them), so the page of one
// source does not put them on its filter links as if they counted what
// those links list (shop's one event under "all (3)"), and says whose its
// counts are. Without a source the links count what they list. On both
// stores.
func TestEventsCountsOfOneSource(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})
			for _, ev := range [][2]string{{"forms", "e1"}, {"forms", "e2"}, {"shop", "o1"}} {
				_, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: ev[0], EventID: ev[1], Type: "t", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			}
			s := signIn(t, srv.URL, token)
			page := s.get("/events")
			require.Contains(t, page, `<a href="/events" aria-current="page">all (3)</a>`)
			require.Contains(t, page, `<a href="/events?status=unmapped">unmapped (3)</a>`)
			require.Contains(t, page, "3 events, 3 deliveries")

			page = s.get("/events?source=shop")
			require.Contains(t, page, "shop/o1")
			require.NotContains(t, page, "forms/e1")
			require.Contains(t, page, `<a href="/events?source=shop" aria-current="page">all</a>`, "no count of every source on the link to shop's")
			require.Contains(t, page, `<a href="/events?source=shop&amp;status=unmapped">unmapped</a>`)
			require.Contains(t, page, "Of every source: 3 events kept. Received in all, those forgotten on retention included: 3 events, 3 deliveries", "the page says whose its counts are")
		})
	}
}
