package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

const (
	retention          = 30 * 24 * time.Hour
	tombstoneRetention = 400 * 24 * time.Hour
	day                = 24 * time.Hour
)

// setupRetention is setup with the default retention periods spelled out,
// for tests that move the clock past them.
func setupRetention(t *testing.T, h Harness) *bundle {
	return setup(t, h, func(o *opledger.Options) {
		o.Retention = retention
		o.TombstoneRetention = tombstoneRetention
	})
}

// testEventRetention: Compact deletes deliveries after the retention
// period and events and tracked objects after the tombstone retention,
// while EventStats keeps counting them (and counts apart, in Kept, the
// events still listed); an event keeps being recognised until it is
// forgotten. Compactions running at once count nothing twice.
func testEventRetention(t *testing.T, h Harness) {
	t.Run("Periods", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		rules := mustRules(t)
		receive := func(e opledger.Event) *opledger.EventResult {
			t.Helper()
			res, err := b.ledger.ReceiveEvent(b.ctx, rules, e)
			require.NoError(t, err)
			return res
		}
		compact := func() opledger.CompactResult {
			t.Helper()
			res, err := b.ledger.Compact(b.ctx)
			require.NoError(t, err)
			return res
		}
		stats := func() opledger.EventStats {
			t.Helper()
			st, err := b.ledger.EventStats(b.ctx, false)
			require.NoError(t, err)
			return *st
		}
		figures := func(applied, unmapped, deliveries, duplicates int) opledger.EventStats {
			return opledger.EventStats{Events: applied + unmapped, Deliveries: deliveries, DuplicateDeliveries: duplicates,
				EventsByStatus: map[opledger.EventStatus]int{opledger.EventApplied: applied, opledger.EventUnmapped: unmapped,
					opledger.EventOutOfOrder: 0, opledger.EventConflict: 0},
				Kept: applied + unmapped,
				KeptByStatus: map[opledger.EventStatus]int{opledger.EventApplied: applied, opledger.EventUnmapped: unmapped,
					opledger.EventOutOfOrder: 0, opledger.EventConflict: 0}}
		}
		// listed counts the events ListEvents gives, as Kept should.
		listed := func() int {
			t.Helper()
			n := 0
			for cursor := ""; ; {
				page, err := b.ledger.ListEvents(b.ctx, opledger.EventListOptions{Cursor: cursor})
				require.NoError(t, err)
				n += len(page.Items)
				if cursor = page.NextCursor; cursor == "" {
					return n
				}
			}
		}
		deliveryIDs := func(source, id string) []string {
			t.Helper()
			detail, err := b.ledger.GetEvent(b.ctx, source, id)
			require.NoError(t, err)
			out := []string{}
			for _, d := range detail.Deliveries {
				out = append(out, d.DeliveryID)
			}
			return out
		}

		receive(submission("evt-1", "dlv-1", "S-1", 2))
		require.True(t, receive(submission("evt-1", "dlv-2", "S-1", 2)).Duplicate)
		receive(orderUpdate("ord-v1", 1, `[]`)) // tracks order 1001
		receive(opledger.Event{Source: "forms", EventID: "evt-2", Type: "nobody.listens", Payload: json.RawMessage(`{}`)})
		require.Equal(t, figures(2, 1, 4, 1), stats())
		require.Equal(t, opledger.CompactResult{}, compact(), "nothing is old enough")

		b.clock.Advance(retention + day) // day 31
		require.True(t, receive(submission("evt-1", "dlv-3", "S-1", 2)).Duplicate, "an event is recognised after its deliveries' retention")
		res := compact()
		require.Equal(t, opledger.CompactResult{DeliveriesCompacted: 4}, res, "the deliveries older than the retention period")
		require.Equal(t, []string{"dlv-3"}, deliveryIDs("forms", "evt-1"), "the newer delivery stays")
		require.Equal(t, figures(2, 1, 5, 2), stats(), "totals count what was deleted")
		require.Equal(t, opledger.CompactResult{}, compact(), "a second run finds nothing")
		// The tracked object still orders: an older version is out of order.
		require.Equal(t, opledger.EventApplied, receive(orderUpdate("ord-v2", 2, `[]`)).Status)
		require.Equal(t, opledger.EventOutOfOrder, receive(orderUpdate("ord-v0", 0, `[]`)).Status)

		b.clock.Advance(tombstoneRetention - 15*day) // day 416
		res = compact()
		require.Equal(t, opledger.CompactResult{DeliveriesCompacted: 3, EventsForgotten: 3, EventObjectsForgotten: 0}, res,
			"the deliveries of day 31, and the events of day 0")
		_, err := b.ledger.GetEvent(b.ctx, "forms", "evt-1")
		require.ErrorIs(t, err, opledger.ErrNotFound)
		require.Equal(t, []string{}, deliveryIDs("shop", "ord-v2"), "an event younger than the tombstone retention stays")
		st := stats()
		require.Equal(t, 5, st.Events, "received, the forgotten included")
		require.Equal(t, 2, st.Kept, "kept: the two order events of day 31")
		require.Equal(t, map[opledger.EventStatus]int{opledger.EventApplied: 1, opledger.EventOutOfOrder: 1,
			opledger.EventConflict: 0, opledger.EventUnmapped: 0}, st.KeptByStatus)
		require.Equal(t, st.Kept, listed(), "Kept counts what the list shows")

		b.clock.Advance(31 * day) // day 447
		res = compact()
		require.Equal(t, opledger.CompactResult{EventsForgotten: 2, EventObjectsForgotten: 1}, res,
			"the events of day 31 and the object they last moved")
		all := figures(3, 1, 7, 2)
		all.EventsByStatus[opledger.EventOutOfOrder] = 1
		all.Events++
		all.Kept = 0
		all.KeptByStatus = map[opledger.EventStatus]int{opledger.EventApplied: 0, opledger.EventUnmapped: 0,
			opledger.EventOutOfOrder: 0, opledger.EventConflict: 0}
		require.Equal(t, all, stats(), "totals never go down; none is kept")
		require.Zero(t, listed())

		// A forgotten event is new again; the operation it maps to is still
		// there, with the same content.
		again := receive(submission("evt-1", "dlv-4", "S-1", 2))
		require.False(t, again.Duplicate)
		require.Equal(t, opledger.EventApplied, again.Status)
		require.Equal(t, []string{"intake:S-1:create"}, opKeys(again.Operations))
	})

	t.Run("ConcurrentCompactions", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		rules := mustRules(t)
		// More deliveries than one batch of retention, from 16 callers.
		const events, deliveriesEach = 50, 25
		var wg sync.WaitGroup
		errs := make(chan error, events*deliveriesEach)
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < events*deliveriesEach; i += 16 {
					e := opledger.Event{Source: "forms", EventID: fmt.Sprintf("evt-%02d", i%events),
						DeliveryID: fmt.Sprintf("dlv-%d", i), Type: "nobody.listens", Payload: json.RawMessage(`{}`)}
					if _, err := b.ledger.ReceiveEvent(b.ctx, rules, e); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		before, err := b.ledger.EventStats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, events*deliveriesEach, before.Deliveries)
		require.Equal(t, events, before.Events)

		// Four compactions at once, twice: past the retention period, then
		// past the tombstone retention.
		for _, step := range []time.Duration{retention + day, tombstoneRetention} {
			b.clock.Advance(step)
			var total opledger.CompactResult
			for _, r := range b.compactAtOnce(t, 4) {
				total.DeliveriesCompacted += r.DeliveriesCompacted
				total.EventsForgotten += r.EventsForgotten
			}
			if step == tombstoneRetention {
				require.Equal(t, opledger.CompactResult{EventsForgotten: events}, total, "each event forgotten once")
			} else {
				require.Equal(t, opledger.CompactResult{DeliveriesCompacted: events * deliveriesEach}, total, "each delivery compacted once")
			}
			after, err := b.ledger.EventStats(b.ctx, false)
			require.NoError(t, err)
			require.Equal(t, before.EventsByStatus, after.EventsByStatus, "totals unchanged")
			require.Equal(t, [3]int{before.Events, before.Deliveries, before.DuplicateDeliveries},
				[3]int{after.Events, after.Deliveries, after.DuplicateDeliveries}, "totals unchanged")
			if step == tombstoneRetention {
				require.Zero(t, after.Kept, "none kept")
			} else {
				require.Equal(t, events, after.Kept, "every event kept")
			}
		}
	})
}
