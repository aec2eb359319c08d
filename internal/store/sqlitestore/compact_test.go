package sqlitestore

import (
	"testing"

	"github.com/opledger/opledger/internal/store/storecheck"
)

// TestCompactOperations: retention's batch write (storecheck).
func TestCompactOperations(t *testing.T) {
	t.Parallel()
	storecheck.CompactOperations(t, openTestStore(t))
}

// TestFinalBeforePages: retention's pages of final operations
// (storecheck).
func TestFinalBeforePages(t *testing.T) {
	t.Parallel()
	storecheck.FinalBeforePages(t, openTestStore(t))
}
