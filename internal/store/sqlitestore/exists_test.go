package sqlitestore

import (
	"testing"

	"github.com/opledger/opledger/internal/store/storecheck"
)

// TestExists: the existence reads events use (storecheck).
func TestExists(t *testing.T) {
	t.Parallel()
	storecheck.Exists(t, openTestStore(t))
}

// TestOldestDue: both paths of OldestDue (storecheck).
func TestOldestDue(t *testing.T) {
	t.Parallel()
	storecheck.OldestDue(t, openTestStore(t))
}

// TestGetOperationNoWait: GetOperationNoWait reads as GetOperation does
// (storecheck): the transaction holds SQLite's only write lock.
func TestGetOperationNoWait(t *testing.T) {
	t.Parallel()
	storecheck.GetOperationNoWait(t, openTestStore(t), nil)
}

// TestClosedInFlight: a read running when the store is closed fails with
// store.ErrClosed (storecheck).
func TestClosedInFlight(t *testing.T) {
	t.Parallel()
	storecheck.ClosedInFlight(t, openTestStore(t))
}

// TestLastTimelineEntry: an operation's newest timeline entry, read
// alone (storecheck).
func TestLastTimelineEntry(t *testing.T) {
	t.Parallel()
	storecheck.LastTimelineEntry(t, openTestStore(t))
}

// TestCountTimeline: the entries of an operation's timeline after its
// newest into a state, counted (storecheck).
func TestCountTimeline(t *testing.T) {
	t.Parallel()
	storecheck.CountTimeline(t, openTestStore(t))
}
