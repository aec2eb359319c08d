package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/store"
)

// LedgerCheck is what HoldsLedger found: where the connection would create
// the ledger's tables, and whether a ledger is there already.
type LedgerCheck struct {
	// Schema is the schema the connection's search_path creates in (its
	// current_schema()); empty when no schema of the search_path exists.
	Schema string
	// SearchPath is the connection's search_path, as the server reports it.
	SearchPath string
	// Holds is whether Schema holds an opledger ledger: its
	// schema_migrations table, which records store.FirstMigration as
	// version 1. Another application's table of that name does not count.
	Holds bool
	// Others names, when Schema holds no ledger, up to six of its tables
	// and views, sorted: another application's, which Migrate will not
	// mix the ledger's tables with. Empty for an empty schema.
	Others []string
}

// holdsLedgerQuery reads, without writing, the schema new tables go to,
// whether schema_migrations is a table of it with the columns the ledger
// reads (so that the next query cannot fail on another application's),
// and the first of the schema's relations. current_schema() is NULL when
// no schema named by the search_path exists.
const holdsLedgerQuery = `SELECT COALESCE(current_schema(), ''), current_setting('search_path'),
	(SELECT count(*) = 2 FROM pg_catalog.pg_attribute a
		WHERE a.attrelid = (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = current_schema() AND c.relname = 'schema_migrations' AND c.relkind IN ('r', 'p'))
		AND NOT a.attisdropped
		AND ((a.attname = 'version' AND a.atttypid = 'integer'::regtype) OR (a.attname = 'name' AND a.atttypid = 'text'::regtype))),
	ARRAY(SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1 LIMIT 6)`

// FirstSchema is the first schema the search_path names, as written
// there (a quoted identifier keeps its quotes, commas and doubled quotes
// in it included), for a hint to create it ("$user", the user's own
// schema, is left to the reader).
func (c LedgerCheck) FirstSchema() string {
	first := firstPathElement(strings.TrimSpace(c.SearchPath))
	if first == "" || first == `"$user"` {
		return "<schema>"
	}
	return first
}

// firstPathElement is path up to its first comma outside a double-quoted
// identifier (in which "" stands for one quote), trimmed.
func firstPathElement(path string) string {
	quoted := false
	for i := 0; i < len(path); i++ {
		switch {
		case path[i] == '"':
			quoted = !quoted // "" inside an identifier closes and reopens it
		case path[i] == ',' && !quoted:
			return strings.TrimSpace(path[:i])
		}
	}
	return path
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func holdsLedger(ctx context.Context, q queryRower) (LedgerCheck, error) {
	var c LedgerCheck
	var shaped bool
	if err := q.QueryRow(ctx, holdsLedgerQuery).Scan(&c.Schema, &c.SearchPath, &shaped, &c.Others); err != nil {
		return LedgerCheck{}, fmt.Errorf("read postgres catalog: %w", err)
	}
	if shaped {
		err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 1 AND name = $1)`,
			store.FirstMigration).Scan(&c.Holds)
		if err != nil {
			return LedgerCheck{}, fmt.Errorf("read schema_migrations: %w", err)
		}
	}
	if c.Holds || len(c.Others) == 0 {
		c.Others = nil
	}
	return c, nil
}

// checkLedger refuses (store.ErrNotLedger) a schema that holds another
// application's tables and no ledger.
func checkLedger(c LedgerCheck) error {
	if c.Holds || len(c.Others) == 0 {
		return nil
	}
	return fmt.Errorf("%w: schema %s holds other tables (%s) and no opledger ledger; give opledger an empty schema of its own (CREATE SCHEMA opledger, and search_path=opledger in the DSN)",
		store.ErrNotLedger, c.Schema, strings.Join(c.Others, ", "))
}

// HoldsLedger reports whether the schema the store's connections create
// in (the first existing schema of their search_path) holds an opledger
// ledger, reading the catalog without writing anything. Open and Migrate
// would make an empty schema a ledger. Its errors are those of the
// store's other reads (store.ErrClosed once Close has been called).
func (s *Store) HoldsLedger(ctx context.Context) (LedgerCheck, error) {
	if err := s.checkOpen(); err != nil {
		return LedgerCheck{}, err
	}
	c, err := holdsLedger(ctx, s.pool)
	return c, s.settled(lostBeforeCommit(err))
}

// HoldsLedger is Store.HoldsLedger on one connection of its own to the
// database named by dsn, for a caller that does not mean to open the
// store: it writes nothing.
func HoldsLedger(ctx context.Context, dsn string) (LedgerCheck, error) {
	cfg, err := pgxpool.ParseConfig(dsn) // takes the pool settings a store DSN may carry
	if err != nil {
		return LedgerCheck{}, fmt.Errorf("open postgres: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return LedgerCheck{}, fmt.Errorf("open postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return holdsLedger(ctx, conn)
}
