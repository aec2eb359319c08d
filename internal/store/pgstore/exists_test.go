package pgstore_test

import (
	"testing"

	"github.com/opledger/opledger/internal/store/storecheck"
	"github.com/opledger/opledger/internal/testdb"
)

// TestExists: the plain existence reads events use instead of locking
// reads (storecheck).
func TestExists(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.Exists(t, s)
}

// TestOldestDue: both paths of OldestDue (storecheck).
func TestOldestDue(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.OldestDue(t, s)
}

// TestGetOperationNoWait: GetOperationNoWait reads as GetOperation does,
// and a row another connection holds fails it with store.ErrConflict at
// once instead of waiting (storecheck).
func TestGetOperationNoWait(t *testing.T) {
	t.Parallel()
	s, dsn := openStore(t)
	storecheck.GetOperationNoWait(t, s, func(tenant, key string) func() {
		return testdb.HoldLock(t, dsn, tenant, key)
	})
}

// TestClosedInFlight: a read running when the store is closed fails with
// store.ErrClosed (storecheck).
func TestClosedInFlight(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.ClosedInFlight(t, s)
}

// TestLastTimelineEntry: an operation's newest timeline entry, read
// alone (storecheck).
func TestLastTimelineEntry(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.LastTimelineEntry(t, s)
}

// TestCountTimeline: the entries of an operation's timeline after its
// newest into a state, counted (storecheck).
func TestCountTimeline(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.CountTimeline(t, s)
}
