package opledger

import (
	"context"
	"errors"

	"github.com/opledger/opledger/internal/store"
)

func openPostgres(ctx context.Context, dsn string) (store.Store, error) {
	return nil, errors.New("open postgres: the PostgreSQL store is not built yet")
}
