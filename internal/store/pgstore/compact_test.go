package pgstore_test

import (
	"testing"

	"github.com/opledger/opledger/internal/store/storecheck"
)

// TestCompactOperations: retention's batch write, in a few statements
// here (storecheck).
func TestCompactOperations(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.CompactOperations(t, s)
}

// TestFinalBeforePages: retention's pages of final operations
// (storecheck).
func TestFinalBeforePages(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	storecheck.FinalBeforePages(t, s)
}
