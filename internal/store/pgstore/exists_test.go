package pgstore_test

import (
	"testing"

	"github.com/opledger/opledger/internal/store/storecheck"
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
