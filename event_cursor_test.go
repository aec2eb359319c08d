package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestListEventsCursorKeepsItsFilters: a cursor of a list of events
// continues only that list. Given with another source or status it is
// refused (it used to be taken, and the other list continued from a place
// it never had, skipping its rows newer than the cursor); with the same
// filters it continues the list, whatever the limit.
func TestListEventsCursorKeepsItsFilters(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			rules, err := opledger.ParseRules([]byte(`
rules:
  - name: accepted
    source: forms
    type: accepted
    operations:
      - key: "intake:{data.n}"
        action: crm.create
        destination: crm
        payload: {n: "{data.n}"}
`))
			require.NoError(t, err)
			// Newest first: shop-3 (unmapped), forms-3 (applied),
			// shop-2, forms-2, ... each source and status interleaved.
			for i := range 4 {
				for _, ev := range []opledger.Event{
					{Source: "forms", EventID: fmt.Sprintf("forms-%d", i), Type: "accepted"},
					{Source: "shop", EventID: fmt.Sprintf("shop-%d", i), Type: "orders/paid"},
				} {
					ev.Payload = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
					_, err := l.ReceiveEvent(ctx, rules, ev)
					require.NoError(t, err)
					clock.Advance(time.Second)
				}
			}
			list := func(o opledger.EventListOptions) ([]string, string) {
				t.Helper()
				page, err := l.ListEvents(ctx, o)
				require.NoError(t, err)
				var ids []string
				for _, e := range page.Items {
					ids = append(ids, e.EventID)
				}
				return ids, page.NextCursor
			}
			unmapped := opledger.EventListOptions{Status: opledger.EventUnmapped, Limit: 2}
			ids, cursor := list(unmapped)
			require.Equal(t, []string{"shop-3", "shop-2"}, ids)
			require.NotEmpty(t, cursor)

			for _, other := range []opledger.EventListOptions{
				{Status: opledger.EventApplied, Cursor: cursor},
				{Cursor: cursor},
				{Source: "forms", Cursor: cursor},
				{Source: "shop", Cursor: cursor},
				{Source: "shop", Status: opledger.EventUnmapped, Cursor: cursor},
			} {
				_, err := l.ListEvents(ctx, other)
				require.ErrorIs(t, err, opledger.ErrInvalidInput, "%+v", other)
				require.ErrorContains(t, err, "cursor does not continue this list")
			}
			// The same filters, another limit: the rest of the list.
			unmapped.Cursor, unmapped.Limit = cursor, 10
			ids, cursor = list(unmapped)
			require.Equal(t, []string{"shop-1", "shop-0"}, ids)
			require.Empty(t, cursor)

			// Every list pages through all its events and only those.
			for _, o := range []opledger.EventListOptions{
				{}, {Source: "forms"}, {Status: opledger.EventApplied}, {Source: "shop", Status: opledger.EventUnmapped},
				{Source: "forms", Status: opledger.EventUnmapped},
			} {
				var all []string
				o.Limit = 3
				for {
					ids, next := list(o)
					all = append(all, ids...)
					if next == "" {
						break
					}
					o.Cursor = next
				}
				want := map[string]int{"": 8, "forms": 4, "applied": 4, "shopunmapped": 4, "formsunmapped": 0}[o.Source+string(o.Status)]
				require.Len(t, all, want, "%+v", o)
			}
			_, err = l.ListEvents(ctx, opledger.EventListOptions{Cursor: "garbage"})
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
		})
	}
}
