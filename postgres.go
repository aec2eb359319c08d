package opledger

import (
	"context"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/pgstore"
)

// openPostgres opens the PostgreSQL store named by a postgres:// DSN.
func openPostgres(ctx context.Context, dsn string) (store.Store, error) {
	s, err := pgstore.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return s, nil
}
