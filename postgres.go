package opledger

import (
	"context"
	"fmt"
	"net/url"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/pgstore"
)

// openPostgres opens the PostgreSQL store named by a postgres:// DSN;
// with opts.ExistingOnly, only if the schema it would create its tables
// in holds a ledger already: the catalog is read before Migrate could
// make an empty schema (or public of a mistyped database) a ledger.
func openPostgres(ctx context.Context, dsn string, opts Options) (store.Store, error) {
	if redact.StrayAt(dsn) {
		// The driver would take what follows the first '@' for the host,
		// and name it in its errors: part of a password.
		return nil, fmt.Errorf("%w: %s", ErrInvalidInput, redact.StrayAtReason)
	}
	s, err := pgstore.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if !opts.ExistingOnly {
		return s, nil
	}
	where := "the postgres DSN"
	if u, err := url.Parse(dsn); err == nil {
		where = redact.DSN(dsn, u)
	}
	c, err := s.HoldsLedger(ctx)
	switch {
	case err != nil:
	case c.Schema == "":
		err = fmt.Errorf("%w: no ledger at %s: no schema of its search_path (%s) exists; create the schema first: CREATE SCHEMA %s",
			ErrInvalidInput, where, c.SearchPath, c.FirstSchema())
	case !c.Holds:
		err = fmt.Errorf("%w: no ledger at %s: schema %s holds no opledger ledger (no opledger schema_migrations table; a command that writes, such as serve or migrate, creates it); it was left as it is",
			ErrInvalidInput, where, c.Schema)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
