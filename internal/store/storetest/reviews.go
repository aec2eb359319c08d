package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testReviews: held operations listed by review time (OrderReview), paged,
// and counted once their review time has passed (Stats.ReviewsOverdue).
func testReviews(t *testing.T, h Harness) {
	// The ledger's time stands still but for b.clock, so that operations
	// held one after the other can share a review time.
	frozen := time.Now().UTC().Truncate(time.Second)
	b := setup(t, h, func(o *opledger.Options) {
		o.HoldReviewAfter = 24 * time.Hour
		clock := o.Clock
		o.Clock = func(time.Time) time.Time { return clock(frozen) }
	})
	acme, err := b.ledger.WithTenant("acme")
	require.NoError(t, err)

	// Recorded in the order a, b, c, d but held in the order c, a, d, b,
	// an hour apart: by review time the list is c, a, d, b, while newest
	// first by creation it is d, c, b, a.
	for _, key := range []string{"a", "b", "c", "d"} {
		b.inState(t, key, opledger.StateUncertain)
		b.clock.Advance(time.Minute)
	}
	(&bundle{ctx: b.ctx, ledger: acme, clock: b.clock}).inState(t, "x", opledger.StateHeld)
	for _, key := range []string{"c", "a", "d", "b"} {
		_, _, err := b.ledger.Reconcile(b.ctx, key, opledger.Finding{Evidence: "no lookup"})
		require.NoError(t, err)
		b.clock.Advance(time.Hour)
	}
	b.inState(t, "u", opledger.StateUncertain)
	b.inState(t, "f", opledger.StateFailed)

	listOf := func(l *opledger.Ledger, o opledger.ListOptions) []string {
		t.Helper()
		var keys []string
		for {
			page, err := l.List(b.ctx, o)
			require.NoError(t, err)
			for _, op := range page.Items {
				keys = append(keys, op.Key)
			}
			if page.NextCursor == "" {
				return keys
			}
			o.Cursor = page.NextCursor
		}
	}
	list := func(o opledger.ListOptions) []string { t.Helper(); return listOf(b.ledger, o) }
	byReview := []string{"c", "a", "d", "b"}
	require.Equal(t, byReview, list(opledger.ListOptions{Order: opledger.OrderReview}), "one page")
	require.Equal(t, byReview, list(opledger.ListOptions{Order: opledger.OrderReview, Limit: 1}), "page after page")
	require.Equal(t, byReview, list(opledger.ListOptions{Order: opledger.OrderReview, States: []opledger.State{opledger.StateHeld}, Limit: 3}))
	require.Equal(t, []string{"d", "c", "b", "a"}, list(opledger.ListOptions{States: []opledger.State{opledger.StateHeld}, Limit: 3}),
		"newest first stays the default")
	require.Equal(t, []string{"x"}, listOf(acme, opledger.ListOptions{Order: opledger.OrderReview}), "each tenant its own")

	// Two operations with the same review time come in key order, and a
	// page boundary between them loses neither.
	b.inState(t, "e", opledger.StateUncertain)
	b.inState(t, "g", opledger.StateUncertain)
	_, _, err = b.ledger.Reconcile(b.ctx, "g", opledger.Finding{Evidence: "no lookup"})
	require.NoError(t, err)
	_, _, err = b.ledger.Reconcile(b.ctx, "e", opledger.Finding{Evidence: "no lookup"})
	require.NoError(t, err)
	byReview = append(byReview, "e", "g")
	for limit := 1; limit <= 3; limit++ {
		require.Equal(t, byReview, list(opledger.ListOptions{Order: opledger.OrderReview, Limit: limit}), "limit %d", limit)
	}

	// Refused: a state other than held, an unknown order, and a cursor of
	// the other order.
	for _, o := range []opledger.ListOptions{
		{Order: opledger.OrderReview, States: []opledger.State{opledger.StateUncertain}},
		{Order: opledger.OrderReview, States: []opledger.State{opledger.StateHeld, opledger.StateFailed}},
		{Order: "oldest"},
	} {
		_, err := b.ledger.List(b.ctx, o)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "%+v", o)
	}
	newest, err := b.ledger.List(b.ctx, opledger.ListOptions{Limit: 1})
	require.NoError(t, err)
	review, err := b.ledger.List(b.ctx, opledger.ListOptions{Order: opledger.OrderReview, Limit: 1})
	require.NoError(t, err)
	_, err = b.ledger.List(b.ctx, opledger.ListOptions{Order: opledger.OrderReview, Cursor: newest.NextCursor})
	require.ErrorIs(t, err, opledger.ErrInvalidInput, "a cursor of newest first")
	_, err = b.ledger.List(b.ctx, opledger.ListOptions{Cursor: review.NextCursor})
	require.ErrorIs(t, err, opledger.ErrInvalidInput, "a cursor of review order")
	// A cursor continues only the list it was issued for: other filters
	// would start a list at a place it never had.
	for _, o := range []opledger.ListOptions{
		{Cursor: newest.NextCursor, States: []opledger.State{opledger.StateHeld}},
		{Cursor: newest.NextCursor, Owner: "ops"},
		{Cursor: newest.NextCursor, Destination: "crm"},
		{Cursor: newest.NextCursor, DuplicateEffects: true},
	} {
		_, err = b.ledger.List(b.ctx, o)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "%+v", o)
		require.ErrorContains(t, err, "another order or other filters")
	}
	_, err = b.ledger.List(b.ctx, opledger.ListOptions{Cursor: newest.NextCursor, Limit: 5})
	require.NoError(t, err, "the page size may change")

	// Overdue reviews. x and c were held at the same time (x just before
	// c), a, d and b one, two and three hours later, e and g four hours
	// later: none is overdue yet.
	overdue := func(allTenants bool) int {
		t.Helper()
		st, err := b.ledger.Stats(b.ctx, allTenants)
		require.NoError(t, err)
		return st.ReviewsOverdue
	}
	require.Equal(t, 0, overdue(false))
	c, err := b.ledger.Get(b.ctx, "c")
	require.NoError(t, err)
	now, err := b.ledger.Now(b.ctx)
	require.NoError(t, err)
	b.clock.Advance(c.ReviewBy.Sub(now))
	require.Equal(t, 0, overdue(false), "due at its review time, overdue only after it")
	b.clock.Advance(time.Second)
	require.Equal(t, 1, overdue(false), "c only")
	require.Equal(t, 2, overdue(true), "and acme's x")
	b.clock.Advance(3 * time.Hour)
	require.Equal(t, 4, overdue(false), "c, a, d and b; not e and g")
	_, _, err = b.ledger.Resolve(b.ctx, "a", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "owner decided"})
	require.NoError(t, err)
	require.Equal(t, 3, overdue(false), "a decided")
	require.Equal(t, []string{"c", "d", "b", "e", "g"}, list(opledger.ListOptions{Order: opledger.OrderReview, Limit: 2}))
}
