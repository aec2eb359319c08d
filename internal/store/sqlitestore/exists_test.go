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
