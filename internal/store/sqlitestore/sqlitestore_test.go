package sqlitestore_test

import (
	"path/filepath"
	"testing"

	"github.com/opledger/opledger/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{NewDSN: func(t *testing.T) string {
		return "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	}})
}
