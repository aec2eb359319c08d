// Package pgstore is the PostgreSQL driver of opledger, built on pgx v5 and
// its connection pool, for several servers and workers on several machines
// sharing one ledger.
//
// Its responsibility is storage only: it maps the rows of package store to
// tables and back and runs transactions; the state machine stays in the root
// package. Every write transaction runs at READ COMMITTED. Inside it the
// operation row is read with SELECT … FOR UPDATE, so decisions about one
// operation queue on its row lock instead of failing, and the write is still
// a compare-and-set on the row's revision (UPDATE … WHERE revision = $prev).
// Lost races, unique violations, serialization failures and deadlocks all
// surface as store.ErrConflict so the caller re-reads and decides again. A
// lock wait past a lock_timeout the DSN sets surfaces as store.ErrBusy, a
// full disk as store.ErrFull (classify).
//
// Times come from the database's clock (now()), are stored as timestamptz
// with microsecond precision, and are returned in UTC; NULL stands for Go's
// zero time. The schema is taken from the connection's search_path (pass
// search_path in the DSN to use another schema than public). No
// LISTEN/NOTIFY is used, and one transaction-level advisory lock only, on
// a key whose row may not exist yet (LockOperationKey: a workflow's step
// keys, and a key shaped like a step's), so that a Postgres-compatible
// engine without advisory locks would need another way to order just
// those two (docs/scaling.md).
//
// Allowed imports: internal/store, internal/store/migrate, and pgx v5
// (pgx, pgconn, pgtype, pgxpool).
package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

var (
	_ store.Store                  = (*Store)(nil)
	_ store.WriteBatcher           = (*pgTx)(nil)
	_ store.OperationAttemptGetter = (*pgTx)(nil)
)

// DefaultMaxConns is the pool size of a store whose DSN does not set
// pool_max_conns. It is kept modest so that several stores (or several
// processes) fit within PostgreSQL's default max_connections of 100.
const DefaultMaxConns = 16

// Store is a PostgreSQL-backed store.Store. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	group   *groupWriter
	analyze firstAnalyze
	// newest is the version of the newest embedded migration: a write
	// transaction refuses a schema past it (schemaGuardSQL).
	newest int
	// closed is set by Close: every call after it is store.ErrClosed.
	closed atomic.Bool
}

// checkOpen is store.ErrClosed once Close has been called.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// settled is a call's error classified (classify), and store.ErrClosed as
// well when Close came while the call ran (store.ClosedDuring).
func (s *Store) settled(err error) error {
	return store.ClosedDuring(classify(err), s.closed.Load())
}

// IsDSN reports whether dsn names a PostgreSQL database: a postgres:// or
// postgresql:// URL, in lower case, as opledger.Open takes it. Anything
// that tells a PostgreSQL DSN from another asks here.
func IsDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open connects to the PostgreSQL database named by dsn, a postgres:// URL
// or a key=value connection string. Pool settings (pool_max_conns, …) and
// runtime parameters such as search_path may be given in the DSN. Open
// checks that the server answers but does not migrate; call Migrate.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{pool: pool}
	if s.newest, err = newestVersion(); err != nil {
		pool.Close()
		return nil, err
	}
	s.group = newGroupWriter(s)
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Name returns "postgres".
func (s *Store) Name() string { return "postgres" }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.pool.Ping(ctx); err != nil {
		return s.settled(lostBeforeCommit(fmt.Errorf("ping postgres: %w", err)))
	}
	return nil
}

// Close closes the connection pool, waiting for connections in use to be
// returned.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.group.close()
	s.analyze.close()
	s.pool.Close()
	return nil
}

// Migrate applies the embedded migrations that the database lacks. Several
// processes may call it at once: each migration transaction locks
// schema_migrations (EXCLUSIVE mode, which plain reads do not wait for,
// while write transactions do: schemaGuardSQL), so exactly one applies
// each version and the others then find it applied. A ledger that lacks
// none is told from a read, without that lock.
func (s *Store) Migrate(ctx context.Context, progress migrate.Progress) (err error) {
	if err := s.checkOpen(); err != nil {
		return err
	}
	defer func() { err = s.settled(err) }()
	migs, err := migrate.Load(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	// A ledger that lacks no migration is told from a read, without
	// migrateOnce's EXCLUSIVE lock: that lock waits for the write
	// transactions under way (their schema guard), and every write
	// transaction behind it would wait too, whenever a process opens
	// the ledger.
	if c, err := holdsLedger(ctx, s.pool); err == nil && c.Holds {
		var current int
		if err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return lostBeforeCommit(fmt.Errorf("read schema version: %w", err))
		}
		if pending, err := migrate.Pending(migs, current); err != nil || len(pending) == 0 {
			return err
		}
	}
	for try := 1; ; try++ {
		err := s.migrateOnce(ctx, migs, progress)
		// Two first-ever CREATE TABLE IF NOT EXISTS racing each other:
		// the loser fails on the catalog's unique index once the winner
		// commits. The table exists now; try again.
		if err != nil && try < 5 && isCatalogRace(err) {
			continue
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "3F000" { // no schema of the search_path exists
			if c, cerr := s.HoldsLedger(ctx); cerr == nil {
				err = fmt.Errorf("%w (the search_path %s names no schema that exists; create the schema first: CREATE SCHEMA %s)", err, c.SearchPath, c.FirstSchema())
			}
		}
		return err
	}
}

// migrateOnce applies the pending migrations in one transaction. A
// connection lost before its COMMIT was sent recorded nothing
// (lostBeforeCommit), as for every write transaction; an error of the
// COMMIT's round trip is left as it is: it may have committed.
func (s *Store) migrateOnce(ctx context.Context, migs []migrate.Migration, progress migrate.Progress) (err error) {
	committing := false
	defer func() {
		if !committing {
			err = lostBeforeCommit(err)
		}
	}()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("begin migration: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Another application's schema is left as it is. (Two first
	// migrations at once both find the schema empty; the loser of the
	// CREATE below finds the winner's ledger on its next try.)
	c, err := holdsLedger(ctx, tx)
	if err != nil {
		return err
	}
	if err := checkLedger(c); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE schema_migrations IN EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("lock schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	pending, err := migrate.Pending(migs, current)
	if err != nil {
		return err
	}
	for i, m := range pending {
		// No arguments: pgx sends it with the simple protocol, which
		// allows several statements in one string.
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			return fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		progress.Report(i+1, len(pending), m.Name)
	}
	committing = true
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit migration: %w", err)
	}
	return nil
}

// isCatalogRace reports a concurrent CREATE TABLE IF NOT EXISTS collision.
func isCatalogRace(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07")
}

// SchemaVersion implements store.Store: a schema without a
// schema_migrations table (of the search_path's first existing schema)
// is at version 0. Its errors are classified as every read's.
func (s *Store) SchemaVersion(ctx context.Context) (current, newest int, err error) {
	if err := s.checkOpen(); err != nil {
		return 0, 0, err
	}
	defer func() { err = s.settled(lostBeforeCommit(err)) }()
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT COALESCE(to_regclass(quote_ident(current_schema()) || '.schema_migrations') IS NOT NULL, false)`).Scan(&exists); err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	if exists {
		if err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return 0, 0, fmt.Errorf("read schema version: %w", err)
		}
	}
	return current, s.newest, nil
}

// MigrationVersions lists the versions of the embedded migrations. They
// must equal sqlitestore's.
func MigrationVersions() ([]int, error) { return migrate.Versions(migrationsFS, "migrations") }

// newestVersion is the version of the newest embedded migration.
var newestVersion = sync.OnceValues(func() (int, error) { return migrate.Newest(migrationsFS, "migrations") })

// Update runs fn in a READ COMMITTED transaction and commits it when fn
// returns nil. Once fn has returned, the commit is not cancelled with
// ctx (groupTimeout bounds it): a cancel that reached the server after
// COMMIT was queued could otherwise be reported as a failure of a write
// that committed. (A connection lost during COMMIT still leaves its
// outcome unknown.) The transaction holds one pooled connection; BEGIN is sent
// with its first statements (see connTx).
func (s *Store) Update(ctx context.Context, fn func(context.Context, store.Tx) error) (err error) {
	if err := s.checkOpen(); err != nil {
		return err
	}
	defer func() { err = s.settled(err) }()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", mapErr(err))
	}
	// A connection still inside a transaction (a failed ROLLBACK, a panic
	// in fn) is destroyed by the pool on release, never reused.
	defer conn.Release()
	c := &connTx{conn: conn, newest: s.newest}
	if err := fn(ctx, &pgTx{reader{q: c, inTx: true, c: c}}); err != nil {
		c.rollback(context.WithoutCancel(ctx))
		return lostBeforeCommit(err)
	}
	// The pending writes and COMMIT go out without ctx's cancellation:
	// once sent, a cancel reaches the server after them, and a commit
	// that happened anyway must not be reported as failed. groupTimeout
	// bounds them, as it bounds a shared transaction.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	if err := c.commit(cctx); err != nil {
		c.rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	s.committed(1)
	return nil
}

// View runs fn against the pool; each statement runs on its own.
func (s *Store) View(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.settled(lostBeforeCommit(fn(ctx, &reader{q: s.pool})))
}

// ViewSnapshot implements store.Store with a read-only REPEATABLE READ
// transaction: every statement sees the snapshot of the first.
func (s *Store) ViewSnapshot(ctx context.Context, fn func(context.Context, store.Reader) error) (err error) {
	if err := s.checkOpen(); err != nil {
		return err
	}
	// Read-only: a connection lost at any point recorded nothing.
	defer func() { err = s.settled(lostBeforeCommit(err)) }()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin snapshot: %w", mapErr(err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(ctx, &reader{q: tx}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// querier is what *pgxpool.Pool and pgx.Tx have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type reader struct {
	q    querier
	inTx bool
	now  time.Time
	// c is the write transaction's connection, for pipelined statements;
	// nil outside Update.
	c *connTx
}

type pgTx struct{ reader }

// mapErr turns the PostgreSQL errors that mean "lost a race" into
// store.ErrConflict, keeping the original in the chain.
func mapErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23505", // unique_violation
			"40001", // serialization_failure
			"40P01": // deadlock_detected
			return fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
	}
	return err
}

// classify marks the PostgreSQL errors that are no fault of the request:
// a lock held by another session for longer than the DSN's lock_timeout
// (lock_not_available, 55P03) with store.ErrBusy, a full disk (disk_full,
// 53100) with store.ErrFull, keeping the original in the chain. The
// transaction was rolled back. A server that could not be reached (no
// connection could be made: it is down, or the network to it is gone) is
// marked store.ErrUnavailable, its text kept as it was: nothing of the
// call was sent (a connection lost before COMMIT is marked so too, by
// lostBeforeCommit, where the caller knows it). Errors already marked store.ErrConflict stay as they
// are: a shared transaction's own short lock_timeout (groupLockTimeout) is
// a conflict its callers decide again after. Every Store method that runs
// SQL returns its error through it.
func classify(err error) error {
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrFull) ||
		errors.Is(err, store.ErrUnavailable) {
		return err
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return unreachable{err}
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "55P03": // lock_not_available
		return fmt.Errorf("%w (%w)", store.ErrBusy, err)
	case "53100": // disk_full
		return fmt.Errorf("%w (%w)", store.ErrFull, err)
	}
	return err
}

// lostBeforeCommit marks err store.ErrUnavailable when it is the loss of
// the connection (the server closed or reset it, or the network to it
// failed) in a read, or in a transaction before its COMMIT was sent: the
// server rolls back a transaction whose connection is gone, so nothing of
// it was recorded, as when no connection could be made. The pool hands
// out a connection idle for less than a second without checking it, so a
// request just after the server went away meets one that died with it.
// The server ending the session itself counts as its loss too: it
// answers the next statement on a connection it terminated (a restart or
// shutdown, pg_terminate_backend, a failover, idle_session_timeout) with
// the FATAL error it closed it with (terminatedCodes).
// An error of the COMMIT's round trip never comes here: the server may
// have committed before the connection was lost.
func lostBeforeCommit(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && terminatedCodes[pe.Code] {
		return unreachable{err}
	}
	if err == nil || pe != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		pgconn.Timeout(err) || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	var ne net.Error
	if pgconn.SafeToRetry(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		(errors.As(err, &ne) && !ne.Timeout()) {
		return unreachable{err}
	}
	return err
}

// terminatedCodes are the SQLSTATEs of a session the server ended (its
// FATAL error): admin_shutdown (a fast shutdown or restart, and
// pg_terminate_backend), crash_shutdown (another backend crashed),
// cannot_connect_now (starting up, shutting down, in recovery) and
// idle_session_timeout.
var terminatedCodes = map[string]bool{"57P01": true, "57P02": true, "57P03": true, "57P05": true}

// unreachable is an error of a call that could not connect to the
// server, or lost its connection before anything was recorded
// (lostBeforeCommit): it reads as the driver's error and matches
// store.ErrUnavailable too.
type unreachable struct{ err error }

func (e unreachable) Error() string        { return e.err.Error() }
func (e unreachable) Unwrap() error        { return e.err }
func (e unreachable) Is(target error) bool { return target == store.ErrUnavailable }

// ts converts a Go time to a nullable timestamptz; the zero time is NULL.
func ts(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// fromTS converts a timestamptz to UTC; NULL is the zero time.
func fromTS(v pgtype.Timestamptz) time.Time {
	if !v.Valid || v.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return v.Time.UTC().Truncate(time.Microsecond)
}

// Now reads the database's clock. Inside a transaction it is read once and
// stays fixed; outside, each call reads the current statement time.
func (r *reader) Now(ctx context.Context) (time.Time, error) {
	if r.inTx && !r.now.IsZero() {
		return r.now, nil
	}
	var v pgtype.Timestamptz
	if err := r.q.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("read clock: %w", mapErr(err))
	}
	now := fromTS(v)
	if r.inTx {
		r.now = now
	}
	return now, nil
}

const opColumns = `tenant, key, action, destination, version, fingerprint, payload, sensitive_fields,
	owner, source_event, requires_approval, approved_by, state, failure_kind, dispatched,
	first_dispatched_at, attempt_count, fencing_token, current_attempt_id, lease_expires_at,
	not_before, review_by, unresolved_since, protected, destination_ref, response, last_error,
	duplicate_effects, revision, created_at, updated_at, protected_until, state_since, earlier_payloads`

// opColumnList is opColumns split into names.
var opColumnList = func() []string {
	cols := strings.Split(opColumns, ",")
	for i, c := range cols {
		cols[i] = strings.TrimSpace(c)
	}
	return cols
}()

// updateOperationSQL sets every column but tenant and key ($1, $2) and
// checks the previous revision (the last parameter).
var updateOperationSQL = func() string {
	sets := make([]string, 0, len(opColumnList)-2)
	for i, c := range opColumnList[2:] {
		sets = append(sets, c+" = $"+strconv.Itoa(i+3))
	}
	return `UPDATE operations SET ` + strings.Join(sets, ", ") +
		` WHERE tenant = $1 AND key = $2 AND revision = $` + strconv.Itoa(len(opColumnList)+1)
}()

var insertOperationSQL = `INSERT INTO operations (` + opColumns + `) VALUES (` + placeholders(1, len(opColumnList)) + `)`

// placeholders returns "$from, …, $(from+n-1)".
func placeholders(from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(from+i)
	}
	return strings.Join(ps, ", ")
}

func scanOperation(row pgx.Row) (*store.Operation, error) {
	var (
		op                                                store.Operation
		firstDisp, lease, notBefore, reviewBy, unresolved pgtype.Timestamptz
		created, updated, protectedUntil, stateSince      pgtype.Timestamptz
	)
	err := row.Scan(&op.Tenant, &op.Key, &op.Action, &op.Destination, &op.Version, &op.Fingerprint,
		&op.Payload, &op.SensitiveFields, &op.Owner, &op.SourceEvent, &op.RequiresApproval, &op.ApprovedBy,
		&op.State, &op.FailureKind, &op.Dispatched, &firstDisp, &op.AttemptCount, &op.FencingToken,
		&op.CurrentAttemptID, &lease, &notBefore, &reviewBy, &unresolved, &op.Protected,
		&op.DestinationRef, &op.Response, &op.LastError, &op.DuplicateEffects, &op.Revision,
		&created, &updated, &protectedUntil, &stateSince, &op.EarlierPayloads)
	if err != nil {
		return nil, err
	}
	if op.SensitiveFields == nil {
		op.SensitiveFields = []string{}
	}
	op.FirstDispatchedAt = fromTS(firstDisp)
	op.LeaseExpiresAt = fromTS(lease)
	op.NotBefore = fromTS(notBefore)
	op.ReviewBy = fromTS(reviewBy)
	op.UnresolvedSince = fromTS(unresolved)
	op.CreatedAt = fromTS(created)
	op.UpdatedAt = fromTS(updated)
	op.ProtectedUntil = fromTS(protectedUntil)
	op.StateSince = fromTS(stateSince)
	return &op, nil
}

// opArgs returns the values of opColumns, in order.
func opArgs(op *store.Operation) []any {
	sensitive := op.SensitiveFields
	if sensitive == nil {
		sensitive = []string{}
	}
	payload := op.Payload
	if payload == nil {
		payload = []byte("null")
	}
	return []any{op.Tenant, op.Key, op.Action, op.Destination, op.Version, op.Fingerprint,
		payload, sensitive, op.Owner, op.SourceEvent, op.RequiresApproval, op.ApprovedBy,
		op.State, op.FailureKind, op.Dispatched, ts(op.FirstDispatchedAt),
		op.AttemptCount, op.FencingToken, op.CurrentAttemptID, ts(op.LeaseExpiresAt),
		ts(op.NotBefore), ts(op.ReviewBy), ts(op.UnresolvedSince),
		op.Protected, op.DestinationRef, op.Response, op.LastError, op.DuplicateEffects,
		op.Revision, ts(op.CreatedAt), ts(op.UpdatedAt), ts(op.ProtectedUntil), ts(op.StateSince), op.EarlierPayloads}
}

// GetOperation reads one operation. Inside a write transaction it locks the
// row (FOR UPDATE) until the transaction ends, so that every decision about
// an operation, including retention's delete, sees the latest committed row.
func (r *reader) GetOperation(ctx context.Context, tenant, key string) (*store.Operation, error) {
	q := `SELECT ` + opColumns + ` FROM operations WHERE tenant = $1 AND key = $2`
	if r.inTx {
		q += ` FOR UPDATE`
	}
	return r.getOperation(ctx, q, tenant, key)
}

// GetOperationNoWait is GetOperation with FOR UPDATE NOWAIT: a row
// another transaction holds fails the statement (lock_not_available),
// which aborts the transaction, and is store.ErrConflict. Writes held
// back go out first, on their own: a lock timeout of theirs, the same
// error code, stays store.ErrBusy.
func (t *pgTx) GetOperationNoWait(ctx context.Context, tenant, key string) (*store.Operation, error) {
	if t.c != nil && len(t.c.pending) > 0 {
		if err := t.c.begin(ctx); err != nil {
			return nil, err
		}
	}
	op, err := t.getOperation(ctx, `SELECT `+opColumns+` FROM operations WHERE tenant = $1 AND key = $2 FOR UPDATE NOWAIT`, tenant, key)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "55P03" { // lock_not_available
		return nil, fmt.Errorf("%w: operation %s is held by another transaction: %w", store.ErrConflict, key, err)
	}
	return op, err
}

// getOperation runs q, a query of one operation row by tenant and key.
func (r *reader) getOperation(ctx context.Context, q, tenant, key string) (*store.Operation, error) {
	if r.c != nil && r.now.IsZero() {
		return r.getOperationAndClock(ctx, q, tenant, key)
	}
	op, err := scanOperation(r.q.QueryRow(ctx, q, tenant, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation: %w", mapErr(err))
	}
	return op, nil
}

// getOperationAndClock is the first read of a write transaction that has
// not read the clock yet: BEGIN (if not sent), the row lock and the clock
// in one round trip. PostgreSQL runs them in order, so the clock is read
// after the lock is granted and after any earlier writer of the row has
// committed: times of one operation never go back.
func (r *reader) getOperationAndClock(ctx context.Context, q, tenant, key string) (*store.Operation, error) {
	op, _, err := r.pipelinedGet(ctx, q, tenant, key, "")
	return op, err
}

// GetOperationAndAttempt reads and locks the operation and reads one of its
// attempts in one round trip (with BEGIN and the clock where still due).
// The attempt is read after the operation's lock is granted, and attempts
// change only under that lock.
func (t *pgTx) GetOperationAndAttempt(ctx context.Context, tenant, key, attemptID string) (*store.Operation, *store.Attempt, error) {
	if t.c == nil {
		op, err := t.GetOperation(ctx, tenant, key)
		if err != nil {
			return nil, nil, err
		}
		a, err := t.GetAttempt(ctx, tenant, key, attemptID)
		if errors.Is(err, store.ErrNotFound) {
			return op, nil, nil
		}
		return op, a, err
	}
	return t.pipelinedGet(ctx, `SELECT `+opColumns+` FROM operations WHERE tenant = $1 AND key = $2 FOR UPDATE`, tenant, key, attemptID)
}

// pipelinedGet sends BEGIN (if not sent), the pending writes, the operation
// query q, the clock (if not read yet) and the attempt (if attemptID is
// set) in one round trip.
func (r *reader) pipelinedGet(ctx context.Context, q, tenant, key, attemptID string) (*store.Operation, *store.Attempt, error) {
	p := r.c.pipeline()
	p.b.Queue(q, tenant, key)
	readClock := r.now.IsZero()
	if readClock {
		p.b.Queue(`SELECT clock_timestamp()`)
	}
	if attemptID != "" {
		p.b.Queue(getAttemptSQL, attemptID, tenant, key)
	}
	br, err := p.send(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer br.Close()
	op, opErr := scanOperation(br.QueryRow())
	if opErr != nil && !errors.Is(opErr, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("get operation: %w", mapErr(opErr))
	}
	var now time.Time
	if readClock {
		var v pgtype.Timestamptz
		if err := br.QueryRow().Scan(&v); err != nil {
			return nil, nil, fmt.Errorf("read clock: %w", mapErr(err))
		}
		now = fromTS(v)
	}
	var a *store.Attempt
	if attemptID != "" {
		a, err = scanAttempt(br.QueryRow())
		if errors.Is(err, pgx.ErrNoRows) {
			a, err = nil, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("get attempt: %w", mapErr(err))
		}
	}
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("get operation: %w", mapErr(err))
	}
	if readClock {
		r.now = now
	}
	if opErr != nil {
		return nil, nil, store.ErrNotFound
	}
	return op, a, nil
}

// GetTombstone reads the tombstone of a key.
func (r *reader) GetTombstone(ctx context.Context, tenant, key string) (*store.Tombstone, error) {
	var t store.Tombstone
	var created, finished, compacted pgtype.Timestamptz
	var dup, attempts int32
	err := r.q.QueryRow(ctx, `SELECT tenant, key, fingerprint, state, failure_kind, destination_ref,
		duplicate_effects, version, attempt_count, created_at, finished_at, compacted_at FROM tombstones WHERE tenant = $1 AND key = $2`, tenant, key).
		Scan(&t.Tenant, &t.Key, &t.Fingerprint, &t.State, &t.FailureKind, &t.DestinationRef, &dup, &t.Version, &attempts, &created, &finished, &compacted)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get tombstone: %w", mapErr(err))
	}
	t.DuplicateEffects, t.AttemptCount = int(dup), int(attempts)
	t.CreatedAt, t.FinishedAt, t.CompactedAt = fromTS(created), fromTS(finished), fromTS(compacted)
	return &t, nil
}

const attemptColumns = `id, tenant, key, number, fencing_token, worker, protected, claimed_at,
	lease_expires_at, dispatched_at, finished_at, outcome, destination_ref, response, error, stale, destination, late_outcome, version`

const getAttemptSQL = `SELECT ` + attemptColumns + ` FROM attempts WHERE id = $1 AND tenant = $2 AND key = $3`

func scanAttempt(row pgx.Row) (*store.Attempt, error) {
	var a store.Attempt
	var claimed, lease, dispatched, finished pgtype.Timestamptz
	if err := row.Scan(&a.ID, &a.Tenant, &a.Key, &a.Number, &a.FencingToken, &a.Worker, &a.Protected,
		&claimed, &lease, &dispatched, &finished, &a.Outcome, &a.DestinationRef, &a.Response, &a.Error, &a.Stale, &a.Destination,
		&a.LateOutcome, &a.Version); err != nil {
		return nil, err
	}
	a.ClaimedAt, a.LeaseExpiresAt = fromTS(claimed), fromTS(lease)
	a.DispatchedAt, a.FinishedAt = fromTS(dispatched), fromTS(finished)
	return &a, nil
}

// GetAttempt reads one attempt of an operation.
func (r *reader) GetAttempt(ctx context.Context, tenant, key, id string) (*store.Attempt, error) {
	a, err := scanAttempt(r.q.QueryRow(ctx, getAttemptSQL, id, tenant, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get attempt: %w", mapErr(err))
	}
	return a, nil
}

// ListAttempts lists the attempts of an operation, oldest first.
func (r *reader) ListAttempts(ctx context.Context, tenant, key string) ([]*store.Attempt, error) {
	rows, err := r.q.Query(ctx, `SELECT `+attemptColumns+` FROM attempts
		WHERE tenant = $1 AND key = $2 ORDER BY number, id`, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, fmt.Errorf("list attempts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list attempts: %w", mapErr(err))
	}
	return out, nil
}

// ListTimeline lists the timeline of an operation, oldest first.
func (r *reader) ListTimeline(ctx context.Context, tenant, key string) ([]*store.TimelineEntry, error) {
	rows, err := r.q.Query(ctx, `SELECT id, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence
		FROM timeline WHERE tenant = $1 AND key = $2 ORDER BY id`, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("list timeline: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.TimelineEntry
	for rows.Next() {
		var e store.TimelineEntry
		var at pgtype.Timestamptz
		if err := rows.Scan(&e.ID, &e.Tenant, &e.Key, &at, &e.Actor, &e.AttemptID, &e.Event, &e.FromState, &e.ToState, &e.Evidence); err != nil {
			return nil, fmt.Errorf("list timeline: %w", err)
		}
		e.At = fromTS(at)
		out = append(out, &e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list timeline: %w", mapErr(err))
	}
	return out, nil
}

// LastTimelineEntry returns the newest timeline entry of an operation.
func (r *reader) LastTimelineEntry(ctx context.Context, tenant, key string) (*store.TimelineEntry, error) {
	var e store.TimelineEntry
	var at pgtype.Timestamptz
	err := r.q.QueryRow(ctx, `SELECT id, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence
		FROM timeline WHERE tenant = $1 AND key = $2 ORDER BY id DESC LIMIT 1`, tenant, key).
		Scan(&e.ID, &e.Tenant, &e.Key, &at, &e.Actor, &e.AttemptID, &e.Event, &e.FromState, &e.ToState, &e.Evidence)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("last timeline entry: %w", mapErr(err))
	}
	e.At = fromTS(at)
	return &e, nil
}

// CountTimeline counts the entries of an operation's timeline that p
// selects: by its primary key, back from the newest entry to the newest
// into p.SinceState, then forward from that one.
func (r *reader) CountTimeline(ctx context.Context, p store.TimelineCount) (int, error) {
	var n int
	err := r.q.QueryRow(ctx, `SELECT count(*) FROM timeline
		WHERE tenant = $1 AND key = $2 AND event = $4
		AND ($5::text = '' OR (strpos(evidence, '; ') > 0 AND substr(evidence, strpos(evidence, '; ') + 2, length($5::text)) = $5::text))
		AND id > COALESCE((SELECT id FROM timeline WHERE tenant = $1 AND key = $2 AND to_state = $3 ORDER BY id DESC LIMIT 1), 0)`,
		p.Tenant, p.Key, p.SinceState, p.Event, p.ReasonPrefix).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count timeline: %w", mapErr(err))
	}
	return n, nil
}

// ListOperations lists a tenant's operations newest first, filtered and
// paged by (created_at, key), or its held operations by (review_by, key).
func (r *reader) ListOperations(ctx context.Context, p store.ListParams) ([]*store.Operation, error) {
	args := []any{p.Tenant}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"tenant = $1"}
	order := "created_at DESC, key DESC"
	if p.ByReview {
		// The literal lets the planner use operations_held_review.
		where = append(where, "state = 'held'")
		order = "review_by, key"
	} else if len(p.States) > 0 {
		states, err := stateLiterals(p.States)
		if err != nil {
			return nil, fmt.Errorf("list operations: %w", err)
		}
		if len(states) == 1 {
			// One state compared with one value, so that the planner
			// reads that state's part of an index in order.
			where = append(where, "state = "+states[0])
		} else {
			where = append(where, "state IN ("+strings.Join(states, ", ")+")")
		}
	}
	if p.Duplicates {
		// The predicate of operations_duplicates, as a literal.
		where = append(where, "duplicate_effects > 0")
	}
	if p.ExceptCancelled {
		where = append(where, notCancelled)
	}
	if p.Owner != "" {
		where = append(where, "owner = "+arg(p.Owner))
	}
	if p.Destination != "" {
		where = append(where, "destination = "+arg(p.Destination))
	}
	switch {
	case p.AfterAt.IsZero():
	case p.ByReview:
		where = append(where, "(review_by, key) > ("+arg(ts(p.AfterAt))+", "+arg(p.AfterKey)+")")
	default:
		where = append(where, "(created_at, key) < ("+arg(ts(p.AfterAt))+", "+arg(p.AfterKey)+")")
	}
	q := `SELECT ` + opColumns + ` FROM operations WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY ` + order + ` LIMIT ` + arg(p.Limit)
	rows, err := r.q.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, fmt.Errorf("list operations: %w", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list operations: %w", mapErr(err))
	}
	return out, nil
}

// OldestAwaitingApproval returns the operation awaiting approval that
// entered that state (or was revised) the earliest: the operations
// awaiting approval are sorted, a queue of people's work.
func (r *reader) OldestAwaitingApproval(ctx context.Context, tenant string) (store.OperationID, time.Time, error) {
	q, args := `SELECT tenant, key, state_since FROM operations WHERE state = 'awaiting_approval'`, []any{}
	if tenant != "" {
		q, args = q+` AND tenant = $1`, append(args, tenant)
	}
	var id store.OperationID
	var since pgtype.Timestamptz
	err := r.q.QueryRow(ctx, q+` ORDER BY state_since, key LIMIT 1`, args...).Scan(&id.Tenant, &id.Key, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.OperationID{}, time.Time{}, nil
	}
	if err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest operation awaiting approval: %w", mapErr(err))
	}
	return id, fromTS(since), nil
}

// CountOverdueReviews counts the held operations whose review_by has
// passed, from operations_held_review.
func (r *reader) CountOverdueReviews(ctx context.Context, tenant string, now time.Time) (int, error) {
	q, args := `SELECT COUNT(*) FROM operations WHERE state = 'held' AND review_by < $1`, []any{ts(now)}
	if tenant != "" {
		q, args = q+` AND tenant = $2`, append(args, tenant)
	}
	var n int
	if err := r.q.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count overdue reviews: %w", mapErr(err))
	}
	return n, nil
}

// OldestDue returns the due pending operation that has waited longest,
// and since when: the tenant's pending operations oldest first, from
// operations_not_succeeded, until no older one can have waited longer
// (store.OldestDueScan); if too many of them wait for their retry, the
// minimum over the due ones, from operations_due.
func (r *reader) OldestDue(ctx context.Context, tenant string, now time.Time) (store.OperationID, time.Time, error) {
	where, args := ``, []any{store.OldestDueScanRows + 1}
	if tenant != "" {
		where, args = ` AND tenant = $2`, append(args, tenant)
	}
	rows, err := r.q.Query(ctx, `SELECT tenant, key, created_at, not_before, state_since FROM operations
		WHERE state = 'pending'`+where+` ORDER BY created_at, key LIMIT $1`, args...)
	if err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", mapErr(err))
	}
	defer rows.Close()
	var scan store.OldestDueScan
	for rows.Next() {
		var id store.OperationID
		var created, notBefore, pendingSince pgtype.Timestamptz
		if err := rows.Scan(&id.Tenant, &id.Key, &created, &notBefore, &pendingSince); err != nil {
			return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", err)
		}
		if !scan.Next(now, id, fromTS(created), fromTS(notBefore), fromTS(pendingSince)) {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", mapErr(err))
	}
	rows.Close()
	if scan.Concluded() {
		return scan.ID, scan.Since, nil
	}
	args[0] = ts(now)
	var id store.OperationID
	var since pgtype.Timestamptz
	err = r.q.QueryRow(ctx, `SELECT tenant, key, GREATEST(not_before, state_since) AS since FROM operations
		WHERE state = 'pending' AND COALESCE(not_before, '-infinity'::timestamptz) <= $1`+where+` ORDER BY since LIMIT 1`,
		args...).Scan(&id.Tenant, &id.Key, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.OperationID{}, time.Time{}, nil
	}
	if err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", mapErr(err))
	}
	return id, fromTS(since), nil
}

// stateLiterals returns states as SQL string literals. ListOperations
// writes them into its statement rather than passing them as parameters,
// so that every plan sees which states it reads: when succeeded is not
// among them, the planner proves from the literals that
// operations_not_succeeded holds them all, and estimates their rows from
// the column's statistics. With parameters, a generic plan could only
// read that index with the index's condition spelled out beside them, and
// custom plans then counted that condition a second time: one tenth of
// the rows, enough to list the uncertain operations through
// operations_uncertain and sort every one of them (on a ledger of
// 1,000,000 operations a page took a median of 4.9–5.1 ms and up to 123
// ms; 0.23 ms and at most 1.3 ms from operations_not_succeeded, as
// docs/performance.md records).
// A state name is lower-case letters and underscores; anything else is
// refused, never quoted.
func stateLiterals(states []string) ([]string, error) {
	out := make([]string, len(states))
	for i, s := range states {
		if s == "" || strings.TrimLeft(s, "abcdefghijklmnopqrstuvwxyz_") != "" {
			return nil, fmt.Errorf("%q is not a state name", s)
		}
		out[i] = "'" + s + "'"
	}
	return out, nil
}

func (r *reader) ids(ctx context.Context, what, query string, args ...any) ([]store.OperationID, error) {
	rows, err := r.q.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, mapErr(err))
	}
	defer rows.Close()
	var out []store.OperationID
	for rows.Next() {
		var id store.OperationID
		if err := rows.Scan(&id.Tenant, &id.Key); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, mapErr(err))
	}
	return out, nil
}

// ExpiredLeases lists in_progress operations whose lease ended before now,
// by (tenant, key) after after.
func (r *reader) ExpiredLeases(ctx context.Context, now time.Time, after store.OperationID, limit int) ([]store.OperationID, error) {
	// From operations_not_succeeded, whose entries hold lease_expires_at
	// (the literal state tells the planner that the index holds them);
	// in_progress operations are few (one per running worker), so sorting
	// them by (tenant, key) costs little.
	return r.ids(ctx, "list expired leases", `SELECT tenant, key FROM operations
		WHERE state = 'in_progress' AND lease_expires_at < $1 AND (tenant, key) > ($2, $3)
		ORDER BY tenant, key LIMIT $4`, ts(now), after.Tenant, after.Key, limit)
}

// notSucceeded is the condition of operations_not_succeeded, which leaves
// out store.StateSucceeded.
const notSucceeded = "state <> 'succeeded'"

// dueQuery selects operations in state (a constant, never input) whose
// not_before has passed (or is unset), oldest first, but those of
// p.Skip; the COALESCE expression is the one the due and uncertain
// indexes cover.
func dueQuery(state string, p store.DueParams) (string, []any) {
	q := `SELECT tenant, key FROM operations WHERE state = '` + state + `'
		AND COALESCE(not_before, '-infinity'::timestamptz) <= $1`
	args := []any{ts(p.Now)}
	if p.Tenant != "" {
		args = append(args, p.Tenant)
		q += ` AND tenant = $` + strconv.Itoa(len(args))
	}
	if len(p.Destinations) > 0 {
		args = append(args, p.Destinations)
		q += ` AND destination = ANY($` + strconv.Itoa(len(args)) + `)`
	}
	if len(p.Skip) > 0 {
		tenants, keys := idColumns(p.Skip)
		args = append(args, tenants, keys)
		q += ` AND (tenant, key) NOT IN (SELECT * FROM unnest($` + strconv.Itoa(len(args)-1) + `::text[], $` + strconv.Itoa(len(args)) + `::text[]))`
	}
	args = append(args, p.Limit)
	q += ` ORDER BY COALESCE(not_before, '-infinity'::timestamptz) LIMIT $` + strconv.Itoa(len(args))
	return q, args
}

// DueOperations lists pending operations that may be claimed now. It is a
// plain indexed read; the claim is the caller's conditional update.
func (r *reader) DueOperations(ctx context.Context, p store.DueParams) ([]store.OperationID, error) {
	q, args := dueQuery("pending", p)
	return r.ids(ctx, "list due operations", q, args...)
}

// LockDue selects due operations and locks their rows for this transaction
// with FOR UPDATE SKIP LOCKED, so concurrent workers take different rows
// instead of queueing on the same one.
func (t *pgTx) LockDue(ctx context.Context, p store.DueParams) ([]store.OperationID, error) {
	q, args := dueQuery("pending", p)
	return t.ids(ctx, "lock due operations", q+` FOR UPDATE SKIP LOCKED`, args...)
}

// UncertainDue lists uncertain operations of all tenants whose next
// reconciliation time has passed or is unset.
func (r *reader) UncertainDue(ctx context.Context, p store.DueParams) ([]store.OperationID, error) {
	q, args := dueQuery("uncertain", p)
	return r.ids(ctx, "list uncertain operations", q, args...)
}

// FinalBefore lists succeeded and failed operations last updated before
// p.Before, by (updated_at, tenant, key) after p.After.
func (r *reader) FinalBefore(ctx context.Context, p store.FinalParams) ([]store.FinalRow, error) {
	// operations_final finds the range from p.After's time; the rows of
	// one time (one shared transaction's) are sorted by tenant and key.
	after := p.After.UpdatedAt
	if after.IsZero() {
		after = time.Unix(0, 0)
	}
	rows, err := r.q.Query(ctx, `SELECT tenant, key, updated_at FROM operations
		WHERE state IN ('succeeded', 'failed') AND updated_at < $1
		AND updated_at >= $2 AND (updated_at, tenant, key) > ($2, $3, $4)
		ORDER BY updated_at, tenant, key LIMIT $5`,
		ts(p.Before), ts(after), p.After.Tenant, p.After.Key, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list final operations: %w", mapErr(err))
	}
	defer rows.Close()
	var out []store.FinalRow
	for rows.Next() {
		var f store.FinalRow
		var at pgtype.Timestamptz
		if err := rows.Scan(&f.Tenant, &f.Key, &at); err != nil {
			return nil, fmt.Errorf("list final operations: %w", err)
		}
		f.UpdatedAt = fromTS(at)
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list final operations: %w", mapErr(err))
	}
	return out, nil
}

// CountByState counts a tenant's operations by state.
func (r *reader) CountByState(ctx context.Context, tenant string) (map[string]int, error) {
	out, err := r.countByState(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("count operations: %w", err)
	}
	return out, nil
}

// notCancelled leaves out the failed operations that need no decision:
// those an operator cancelled, and the failed step of a cancelled
// workflow, found in the operation's own timeline (timeline_pkey).
const notCancelled = "failure_kind <> 'cancelled' AND NOT EXISTS (SELECT 1 FROM timeline t " +
	"WHERE t.tenant = operations.tenant AND t.key = operations.key AND t.event = '" + store.EventWorkflowCancelled + "')"

// CountFailedNeedingDecision counts a tenant's failed operations but
// those that need no decision (notCancelled's). It reads each failed
// operation's timeline by its key, as a subquery the planner keeps so:
// as NOT EXISTS the count joined the failed operations to a hash of
// every timeline entry, or read every operation in parallel.
func (r *reader) CountFailedNeedingDecision(ctx context.Context, tenant string) (int, error) {
	var n int64
	if err := r.q.QueryRow(ctx, `SELECT COUNT(*) FROM operations
		WHERE tenant = $1 AND state = 'failed' AND failure_kind <> 'cancelled' AND (SELECT 1 FROM timeline t
		WHERE t.tenant = operations.tenant AND t.key = operations.key AND t.event = '`+store.EventWorkflowCancelled+`' LIMIT 1) IS NULL`,
		tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count failed operations: %w", mapErr(err))
	}
	return int(n), nil
}

// CountFailedByKind counts a tenant's failed operations by failure kind.
func (r *reader) CountFailedByKind(ctx context.Context, tenant string) (map[string]int, error) {
	rows, err := r.q.Query(ctx, `SELECT failure_kind, COUNT(*) FROM operations
		WHERE tenant = $1 AND state = 'failed' GROUP BY failure_kind`, tenant)
	if err != nil {
		return nil, fmt.Errorf("count failed operations: %w", mapErr(err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var kind string
		var n int64
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, fmt.Errorf("count failed operations: %w", err)
		}
		out[kind] = int(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count failed operations: %w", mapErr(err))
	}
	return out, nil
}

// tenantIs is the condition of a read for one tenant (tenant = $1) or,
// for an empty tenant, for every tenant (a $1 compared with the empty
// string, always true), chosen here rather than in the statement: one
// condition that covers both cases (an OR of the two) keeps a prepared
// statement's generic plan (plan_cache_mode, or PostgreSQL's own choice
// after five executions) from searching an index by tenant, so that one
// tenant's read scans the whole table. Both forms keep $1.
func tenantIs(tenant string) string {
	if tenant == "" {
		return "$1 = ''"
	}
	return "tenant = $1"
}

// countByState counts a tenant's operations ("" for all tenants) by state:
// all but the succeeded ones from operations_not_succeeded, then, in the
// same statement (the same snapshot), all of them; the succeeded ones are
// the rest. A state with no operation is left out.
func (r *reader) countByState(ctx context.Context, tenant string) (map[string]int, error) {
	cond := tenantIs(tenant)
	rows, err := r.q.Query(ctx, `SELECT state, COUNT(*) FROM operations WHERE `+cond+` AND `+notSucceeded+` GROUP BY state
		UNION ALL SELECT NULL, COUNT(*) FROM operations WHERE `+cond, tenant)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	byState, all := map[string]int{}, 0
	for rows.Next() {
		var state pgtype.Text
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		if state.Valid {
			byState[state.String] = int(n)
		} else {
			all = int(n)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return store.WithSucceeded(byState, all), nil
}

// InsertOperation inserts a new operation; store.ErrConflict if the key
// exists.
func (t *pgTx) InsertOperation(ctx context.Context, op *store.Operation) error {
	return insertOperationWrite(op).run(ctx, t.q)
}

func insertOperationWrite(op *store.Operation) pgWrite {
	return pgWrite{what: "insert operation", sql: insertOperationSQL, args: opArgs(op)}
}

// UpdateOperation writes op if its stored revision still equals
// prevRevision; otherwise store.ErrConflict.
func (t *pgTx) UpdateOperation(ctx context.Context, op *store.Operation, prevRevision int64) error {
	return updateOperationWrite(op, prevRevision).run(ctx, t.q)
}

func updateOperationWrite(op *store.Operation, prevRevision int64) pgWrite {
	return pgWrite{what: "update operation", sql: updateOperationSQL, args: append(opArgs(op), prevRevision),
		none: fmt.Errorf("update operation %s: %w", op.Key, store.ErrConflict)}
}

// LockOperations implements store.Tx: one statement reads and locks the
// operations, sorted, so that two transactions lock them in one order,
// and skips the rows another transaction holds.
func (t *pgTx) LockOperations(ctx context.Context, ids []store.OperationID) ([]*store.Operation, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tenants, keys := idColumns(ids)
	rows, err := t.q.Query(ctx, `SELECT `+opColumns+` FROM operations
		WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		ORDER BY tenant, key FOR UPDATE SKIP LOCKED`, tenants, keys)
	if err != nil {
		return nil, fmt.Errorf("lock operations: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, fmt.Errorf("lock operations: %w", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock operations: %w", mapErr(err))
	}
	return out, nil
}

// CountAttempts implements store.Tx in one statement.
func (t *pgTx) CountAttempts(ctx context.Context, ids []store.OperationID) (map[store.OperationID]map[string]int, error) {
	out := map[store.OperationID]map[string]int{}
	if len(ids) == 0 {
		return out, nil
	}
	tenants, keys := idColumns(ids)
	rows, err := t.q.Query(ctx, `SELECT tenant, key, outcome, count(*) FROM attempts
		WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		GROUP BY tenant, key, outcome`, tenants, keys)
	if err != nil {
		return nil, fmt.Errorf("count attempts: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id store.OperationID
		var outcome string
		var n int
		if err := rows.Scan(&id.Tenant, &id.Key, &outcome, &n); err != nil {
			return nil, fmt.Errorf("count attempts: %w", err)
		}
		if out[id] == nil {
			out[id] = map[string]int{}
		}
		out[id][outcome] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count attempts: %w", mapErr(err))
	}
	return out, nil
}

// CompactOperations implements store.Tx with a few statements for the
// whole batch: one inserts the tombstones (a key that has one already,
// which compaction does not meet, has it replaced as UpsertTombstone
// does), and one each deletes the operations, their timelines and their
// attempts; the deletes go out with the transaction's next statement, a
// lost revision failing it there as store.ErrConflict.
func (t *pgTx) CompactOperations(ctx context.Context, cs []store.Compaction) error {
	if len(cs) == 0 {
		return nil
	}
	n := len(cs)
	tenants, keys, fingerprints, states := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	kinds, refs := make([]string, n), make([]string, n)
	duplicates, versions, attempts, revisions := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	created, finished, compacted := make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	for i, c := range cs {
		tenants[i], keys[i], fingerprints[i], states[i] = c.Tenant, c.Key, c.Fingerprint, c.State
		kinds[i], refs[i] = c.FailureKind, c.DestinationRef
		duplicates[i], versions[i], attempts[i], revisions[i] = int64(c.DuplicateEffects), c.Version, int64(c.AttemptCount), c.Revision
		created[i], finished[i], compacted[i] = ts(c.CreatedAt), ts(c.FinishedAt), ts(c.CompactedAt)
	}
	rows, err := t.q.Query(ctx, `INSERT INTO tombstones (tenant, key, fingerprint, state, failure_kind, destination_ref,
			duplicate_effects, version, attempt_count, created_at, finished_at, compacted_at, counted)
		SELECT tenant, key, fingerprint, state, failure_kind, destination_ref, duplicate_effects, version, attempt_count,
			created_at, finished_at, compacted_at, true
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::bigint[],
			$9::int[], $10::timestamptz[], $11::timestamptz[], $12::timestamptz[])
			AS t (tenant, key, fingerprint, state, failure_kind, destination_ref, duplicate_effects, version,
				attempt_count, created_at, finished_at, compacted_at)
		ON CONFLICT (tenant, key) DO NOTHING
		RETURNING tenant, key`,
		tenants, keys, fingerprints, states, kinds, refs, duplicates, versions, attempts, created, finished, compacted)
	if err != nil {
		return fmt.Errorf("write tombstones: %w", mapErr(err))
	}
	written := make(map[store.OperationID]bool, n)
	for rows.Next() {
		var id store.OperationID
		if err := rows.Scan(&id.Tenant, &id.Key); err != nil {
			rows.Close()
			return fmt.Errorf("write tombstones: %w", err)
		}
		written[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("write tombstones: %w", mapErr(err))
	}
	for i := range cs {
		tb := &cs[i].Tombstone
		if !written[store.OperationID{Tenant: tb.Tenant, Key: tb.Key}] {
			if err := t.UpsertTombstone(ctx, tb); err != nil {
				return err
			}
			continue
		}
		if err := t.addEffects(ctx, tb.Tenant, tb.State, tb.DuplicateEffects, 1); err != nil {
			return err
		}
	}
	var one int64
	return t.later(ctx,
		pgWrite{what: "delete operations", sql: `WITH w AS (DELETE FROM operations
				WHERE (tenant, key, revision) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])) RETURNING 1)
			SELECT 1 / (count(*) = $4)::int FROM w`,
			args: []any{tenants, keys, revisions, n}, scan: []any{&one}, asserted: true,
			none: fmt.Errorf("delete operations: one changed meanwhile: %w", store.ErrConflict)},
		pgWrite{what: "delete operations", sql: `DELETE FROM timeline
			WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, args: []any{tenants, keys}},
		pgWrite{what: "delete operations", sql: `DELETE FROM attempts
			WHERE (tenant, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, args: []any{tenants, keys}})
}

// idColumns splits ids into a column of tenants and one of keys, for
// unnest.
func idColumns(ids []store.OperationID) (tenants, keys []string) {
	tenants, keys = make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		tenants[i], keys[i] = id.Tenant, id.Key
	}
	return tenants, keys
}

// InsertAttempt inserts a new attempt.
func (t *pgTx) InsertAttempt(ctx context.Context, a *store.Attempt) error {
	return insertAttemptWrite(a).run(ctx, t.q)
}

var insertAttemptSQL = `INSERT INTO attempts (` + attemptColumns + `) VALUES (` + placeholders(1, 19) + `)`

func insertAttemptWrite(a *store.Attempt) pgWrite {
	return pgWrite{what: "insert attempt", sql: insertAttemptSQL,
		args: []any{a.ID, a.Tenant, a.Key, a.Number, a.FencingToken, a.Worker, a.Protected, ts(a.ClaimedAt),
			ts(a.LeaseExpiresAt), ts(a.DispatchedAt), ts(a.FinishedAt), a.Outcome,
			a.DestinationRef, a.Response, a.Error, a.Stale, a.Destination, a.LateOutcome, a.Version}}
}

// UpdateAttempt writes the mutable fields of an attempt; store.ErrNotFound
// if it does not exist.
func (t *pgTx) UpdateAttempt(ctx context.Context, a *store.Attempt) error {
	return updateAttemptWrite(a).run(ctx, t.q)
}

func updateAttemptWrite(a *store.Attempt) pgWrite {
	return pgWrite{what: "update attempt", sql: `UPDATE attempts SET dispatched_at = $1, finished_at = $2, outcome = $3,
		destination_ref = $4, response = $5, error = $6, stale = $7, lease_expires_at = $8, late_outcome = $9
		WHERE tenant = $10 AND key = $11 AND id = $12`,
		args: []any{ts(a.DispatchedAt), ts(a.FinishedAt), a.Outcome, a.DestinationRef, a.Response, a.Error,
			a.Stale, ts(a.LeaseExpiresAt), a.LateOutcome, a.Tenant, a.Key, a.ID},
		none: fmt.Errorf("update attempt %s: %w", a.ID, store.ErrNotFound)}
}

// AppendTimeline appends an entry and sets its ID.
func (t *pgTx) AppendTimeline(ctx context.Context, e *store.TimelineEntry) error {
	return appendTimelineWrite(e).run(ctx, t.q)
}

func appendTimelineWrite(e *store.TimelineEntry) pgWrite {
	return pgWrite{what: "append timeline", sql: `INSERT INTO timeline (tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id`,
		args: []any{e.Tenant, e.Key, ts(e.At), e.Actor, e.AttemptID, e.Event, e.FromState, e.ToState, e.Evidence},
		scan: []any{&e.ID}}
}

// UpsertTombstone writes the tombstone of a key, replacing any it has,
// and carries its effects into compacted_effects (migration 015).
func (t *pgTx) UpsertTombstone(ctx context.Context, tb *store.Tombstone) error {
	for {
		tag, err := t.q.Exec(ctx, `INSERT INTO tombstones (tenant, key, fingerprint, state, failure_kind, destination_ref,
			duplicate_effects, version, attempt_count, created_at, finished_at, compacted_at, counted)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, true)
			ON CONFLICT (tenant, key) DO NOTHING`,
			tb.Tenant, tb.Key, tb.Fingerprint, tb.State, tb.FailureKind, tb.DestinationRef, tb.DuplicateEffects, tb.Version,
			tb.AttemptCount, ts(tb.CreatedAt), ts(tb.FinishedAt), ts(tb.CompactedAt))
		if err != nil {
			return fmt.Errorf("write tombstone: %w", mapErr(err))
		}
		if tag.RowsAffected() == 1 {
			return t.addEffects(ctx, tb.Tenant, tb.State, tb.DuplicateEffects, 1)
		}
		// The key has a tombstone already (no operation is recorded under
		// such a key, so compaction does not meet one): take it out with
		// its effects, then write the new one.
		var state string
		var dup int
		var counted bool
		if err := t.q.QueryRow(ctx, `DELETE FROM tombstones WHERE tenant = $1 AND key = $2
			RETURNING state, duplicate_effects, counted`, tb.Tenant, tb.Key).Scan(&state, &dup, &counted); err != nil {
			return fmt.Errorf("replace tombstone: %w", mapErr(err))
		}
		if counted {
			if err := t.addEffects(ctx, tb.Tenant, state, dup, -1); err != nil {
				return err
			}
		}
	}
}

// addEffects adds sign times the effects of a compacted operation (its
// state and duplicate effects) to the tenant's totals. In a write
// transaction they are summed per tenant and written just before COMMIT
// (connTx.effects), so that the tenant's totals row is locked last, after
// every operation row: two processes compacting at once then never hold
// it while waiting for a row the other holds.
func (t *pgTx) addEffects(ctx context.Context, tenant, state string, duplicates, sign int) error {
	confirmed := 0
	if state == store.StateSucceeded {
		confirmed = 1
	}
	if confirmed == 0 && duplicates == 0 {
		return nil
	}
	if t.c != nil {
		if t.c.effects == nil {
			t.c.effects = map[string]effectCounts{}
		}
		e := t.c.effects[tenant]
		e.confirmed += sign * confirmed
		e.duplicates += sign * duplicates
		t.c.effects[tenant] = e
		return nil
	}
	return addEffectsWrite(tenant, effectCounts{sign * confirmed, sign * duplicates}).run(ctx, t.q)
}

// effectCounts are effects of compacted operations to add to a tenant's
// running totals (compacted_effects).
type effectCounts struct{ confirmed, duplicates int }

func addEffectsWrite(tenant string, e effectCounts) pgWrite {
	return pgWrite{what: "carry effect counts",
		sql: `INSERT INTO compacted_effects (tenant, confirmed, duplicates) VALUES ($1, $2, $3)
		ON CONFLICT (tenant) DO UPDATE SET confirmed = compacted_effects.confirmed + excluded.confirmed,
		duplicates = compacted_effects.duplicates + excluded.duplicates`,
		args: []any{tenant, e.confirmed, e.duplicates}}
}

// DeleteTombstonesBefore removes up to limit tombstones compacted before
// t, the oldest first, but for the current step of a workflow not done.
// The effects of those not yet
// counted (written by an earlier release) join compacted_effects in the
// same statement.
func (t *pgTx) DeleteTombstonesBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int
	// The conditions stand in the DELETE as well as in its batch: a
	// tombstone replaced meanwhile (a newer compaction of the same key)
	// is checked again as it is now, and kept.
	err := t.q.QueryRow(ctx, `WITH gone AS (
			DELETE FROM tombstones WHERE compacted_at < $1
			AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.tenant = tombstones.tenant AND w.current_key = tombstones.key AND NOT w.done)
			AND (tenant, key) IN (SELECT b.tenant, b.key FROM tombstones b WHERE b.compacted_at < $1
				AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.tenant = b.tenant AND w.current_key = b.key AND NOT w.done)
				ORDER BY b.compacted_at LIMIT $2)
			RETURNING tenant, state, duplicate_effects, counted
		), carried AS (
			INSERT INTO compacted_effects (tenant, confirmed, duplicates)
			SELECT tenant, COUNT(*) FILTER (WHERE state = 'succeeded'), SUM(duplicate_effects) FROM gone
			WHERE NOT counted GROUP BY tenant ORDER BY tenant -- one lock order for concurrent runs
			ON CONFLICT (tenant) DO UPDATE SET confirmed = compacted_effects.confirmed + excluded.confirmed,
			duplicates = compacted_effects.duplicates + excluded.duplicates
		)
		SELECT count(*) FROM gone`, ts(before), limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("delete tombstones: %w", mapErr(err))
	}
	return n, nil
}

// TokenByHash finds an API token by the SHA-256 of its secret.
func (r *reader) TokenByHash(ctx context.Context, hash string) (*store.Token, error) {
	rows, err := r.tokens(ctx, `WHERE hash = $1`, hash)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, store.ErrNotFound
	}
	return rows[0], nil
}

// ListTokens lists the tokens of a tenant ("" for all), oldest first.
func (r *reader) ListTokens(ctx context.Context, tenant string) ([]*store.Token, error) {
	if tenant == "" {
		return r.tokens(ctx, `ORDER BY created_at, id`)
	}
	return r.tokens(ctx, `WHERE tenant = $1 ORDER BY created_at, id`, tenant)
}

func (r *reader) tokens(ctx context.Context, where string, args ...any) ([]*store.Token, error) {
	rows, err := r.q.Query(ctx, `SELECT id, tenant, name, hash, access, created_at, revoked_at, last_used_at FROM tokens `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Token
	for rows.Next() {
		var t store.Token
		var created, revoked, used pgtype.Timestamptz
		if err := rows.Scan(&t.ID, &t.Tenant, &t.Name, &t.Hash, &t.Access, &created, &revoked, &used); err != nil {
			return nil, fmt.Errorf("read tokens: %w", err)
		}
		t.CreatedAt, t.RevokedAt, t.LastUsedAt = fromTS(created), fromTS(revoked), fromTS(used)
		out = append(out, &t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", mapErr(err))
	}
	return out, nil
}

// InsertToken stores a new token.
func (t *pgTx) InsertToken(ctx context.Context, tok *store.Token) error {
	// read_only (021) is kept for the processes of the release before 022,
	// true for every token that may not decide: migration 022.
	_, err := t.q.Exec(ctx, `INSERT INTO tokens (id, tenant, name, hash, access, read_only, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		tok.ID, tok.Tenant, tok.Name, tok.Hash, tok.Access, tok.Access != "read-write", ts(tok.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert token: %w", mapErr(err))
	}
	return nil
}

// RevokeToken sets revoked_at on an active token.
func (t *pgTx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	tag, err := t.q.Exec(ctx, `UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, ts(at), id)
	if err != nil {
		return fmt.Errorf("revoke token: %w", mapErr(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("revoke token %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// TouchToken sets the token's last_used_at, unless it is at or after
// notBefore already.
func (t *pgTx) TouchToken(ctx context.Context, id string, at, notBefore time.Time) error {
	_, err := t.q.Exec(ctx, `UPDATE tokens SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $3)`,
		ts(at), id, ts(notBefore))
	if err != nil {
		return fmt.Errorf("note the token's use: %w", mapErr(err))
	}
	return nil
}

// SessionByHash finds a session by the SHA-256 of its secret, with the
// revocation time of its token.
func (r *reader) SessionByHash(ctx context.Context, hash string) (*store.Session, error) {
	var s store.Session
	var created, expires, revoked pgtype.Timestamptz
	err := r.q.QueryRow(ctx, `SELECT s.hash, s.token_id, t.name, t.access, s.tenant, s.created_at, s.expires_at, t.revoked_at
		FROM sessions s JOIN tokens t ON t.id = s.token_id WHERE s.hash = $1`, hash).
		Scan(&s.Hash, &s.TokenID, &s.TokenName, &s.TokenAccess, &s.Tenant, &created, &expires, &revoked)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read session: %w", mapErr(err))
	}
	s.CreatedAt, s.ExpiresAt, s.TokenRevokedAt = fromTS(created), fromTS(expires), fromTS(revoked)
	return &s, nil
}

// InsertSession stores a new session.
func (t *pgTx) InsertSession(ctx context.Context, s *store.Session) error {
	_, err := t.q.Exec(ctx, `INSERT INTO sessions (hash, token_id, tenant, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`,
		s.Hash, s.TokenID, s.Tenant, ts(s.CreatedAt), ts(s.ExpiresAt))
	if err != nil {
		return fmt.Errorf("insert session: %w", mapErr(err))
	}
	return nil
}

// DeleteSession removes a session, if it exists.
func (t *pgTx) DeleteSession(ctx context.Context, hash string) error {
	if _, err := t.q.Exec(ctx, `DELETE FROM sessions WHERE hash = $1`, hash); err != nil {
		return fmt.Errorf("delete session: %w", mapErr(err))
	}
	return nil
}

// PutProcess writes a process's row.
func (t *pgTx) PutProcess(ctx context.Context, p *store.Process) error {
	if _, err := t.q.Exec(ctx, `INSERT INTO processes (id, host, pid, started_at, seen_at, settings) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
			seen_at = excluded.seen_at, settings = excluded.settings`,
		p.ID, p.Host, p.PID, ts(p.StartedAt), ts(p.SeenAt), nonNil(p.Settings)); err != nil {
		return fmt.Errorf("write the process row: %w", mapErr(err))
	}
	return nil
}

// DeleteProcesses removes the row of process id and the stale ones.
func (t *pgTx) DeleteProcesses(ctx context.Context, id string, staleBefore time.Time) (int, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM processes WHERE id = $1 OR seen_at < $2`, id, ts(staleBefore))
	if err != nil {
		return 0, fmt.Errorf("delete process rows: %w", mapErr(err))
	}
	return int(tag.RowsAffected()), nil
}

// ListProcesses lists the processes' rows.
func (r *reader) ListProcesses(ctx context.Context) ([]*store.Process, error) {
	rows, err := r.q.Query(ctx, `SELECT id, host, pid, started_at, seen_at, settings FROM processes ORDER BY started_at, id`)
	if err != nil {
		return nil, fmt.Errorf("read processes: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Process
	for rows.Next() {
		var p store.Process
		var started, seen pgtype.Timestamptz
		if err := rows.Scan(&p.ID, &p.Host, &p.PID, &started, &seen, &p.Settings); err != nil {
			return nil, fmt.Errorf("read processes: %w", err)
		}
		p.StartedAt, p.SeenAt = fromTS(started), fromTS(seen)
		out = append(out, &p)
	}
	return out, rows.Err()
}

// GetKeyScope reads a destination's key scope.
func (r *reader) GetKeyScope(ctx context.Context, destination string) (*store.KeyScope, error) {
	k := store.KeyScope{Destination: destination}
	var recorded pgtype.Timestamptz
	err := r.q.QueryRow(ctx, `SELECT settings, recorded_at FROM key_scopes WHERE destination = $1`, destination).
		Scan(&k.Settings, &recorded)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the key scope of %s: %w", destination, mapErr(err))
	}
	k.RecordedAt = fromTS(recorded)
	return &k, nil
}

// InsertKeyScope records a destination's key scope unless one is; an
// insert of another transaction waits for it to end, then counts.
func (t *pgTx) InsertKeyScope(ctx context.Context, k *store.KeyScope) (bool, error) {
	tag, err := t.q.Exec(ctx, `INSERT INTO key_scopes (destination, settings, recorded_at) VALUES ($1, $2, $3)
		ON CONFLICT (destination) DO NOTHING`, k.Destination, nonNil(k.Settings), ts(k.RecordedAt))
	if err != nil {
		return false, fmt.Errorf("record the key scope of %s: %w", k.Destination, mapErr(err))
	}
	return tag.RowsAffected() == 1, nil
}

// UpdateKeyScope replaces a destination's key scope.
func (t *pgTx) UpdateKeyScope(ctx context.Context, k *store.KeyScope) error {
	if _, err := t.q.Exec(ctx, `UPDATE key_scopes SET settings = $1, recorded_at = $2 WHERE destination = $3`,
		nonNil(k.Settings), ts(k.RecordedAt), k.Destination); err != nil {
		return fmt.Errorf("replace the key scope of %s: %w", k.Destination, mapErr(err))
	}
	return nil
}

// nonNil is m, or an empty map for nil, which pgx would store as the
// JSON null rather than an object.
func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// ProbeWrite writes the readiness row; several servers probing at once
// take its lock in turn.
func (t *pgTx) ProbeWrite(ctx context.Context, at time.Time) error {
	if _, err := t.q.Exec(ctx, `INSERT INTO readiness (id, probed_at) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at`, ts(at)); err != nil {
		return fmt.Errorf("write the readiness row: %w", mapErr(err))
	}
	return nil
}

// DeleteSessionsBefore removes up to limit sessions that expired before
// before, skipping rows another transaction holds.
func (t *pgTx) DeleteSessionsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM sessions WHERE hash IN (
		SELECT hash FROM sessions WHERE expires_at < $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, ts(before), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", mapErr(err))
	}
	return int(tag.RowsAffected()), nil
}

// AppendRecovery records an operator decision on an unresolved operation.
func (t *pgTx) AppendRecovery(ctx context.Context, rec *store.Recovery) error {
	// No operation key: the row outlives the operation and its
	// tombstone, and nothing reads it.
	_, err := t.q.Exec(ctx, `INSERT INTO recoveries (tenant, key, decision, at, waited) VALUES ($1, '', $2, $3, $4)`,
		rec.Tenant, rec.Decision, ts(rec.At), rec.Waited.Microseconds())
	if err != nil {
		return fmt.Errorf("record recovery: %w", mapErr(err))
	}
	return nil
}

// ForgetRecoveryKeysBefore clears the keys an older release stored with
// its recoveries. It reads them through recoveries_keyed (migration 028),
// which holds only the rows with a key, so a run costs what there is to
// clear, not a read of every operator decision.
func (t *pgTx) ForgetRecoveryKeysBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := t.q.Exec(ctx, `UPDATE recoveries SET key = '' WHERE id IN (
		SELECT id FROM recoveries WHERE key <> '' AND at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`, ts(before), limit)
	if err != nil {
		return 0, fmt.Errorf("forget recovery keys: %w", mapErr(err))
	}
	return int(tag.RowsAffected()), nil
}

// AddCompactedAttempts carries attempt counts into the running totals.
func (t *pgTx) AddCompactedAttempts(ctx context.Context, tenant, destination, outcome string, n int) error {
	return t.later(ctx, pgWrite{what: "carry attempt counts",
		sql: `INSERT INTO compacted_attempts (tenant, destination, outcome, count) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant, destination, outcome) DO UPDATE SET count = compacted_attempts.count + excluded.count`,
		args: []any{tenant, destination, outcome, n}})
}

// Stats aggregates the figures of DESIGN.md section 10 for a tenant ("" for
// all tenants).
func (r *reader) Stats(ctx context.Context, tenant string, buckets []time.Duration) (*store.Stats, error) {
	// The counts come from operations_not_succeeded and a count of all
	// the tenant's operations, the duplicates from the partial index of
	// operations that have any (migration 006).
	byState, err := r.countByState(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st := &store.Stats{ByState: byState, ConfirmedEffects: byState[store.StateSucceeded]}
	cond := tenantIs(tenant)
	var dup int64
	if err := r.q.QueryRow(ctx, `SELECT COALESCE(SUM(duplicate_effects), 0)::bigint FROM operations
		WHERE `+cond+` AND duplicate_effects > 0`, tenant).Scan(&dup); err != nil {
		return nil, fmt.Errorf("stats: %w", mapErr(err))
	}
	st.DuplicateEffects += int(dup)
	// Compacted operations: the running totals, and the tombstones not
	// counted in them yet (migration 015).
	var compactedConfirmed, compactedDup int64
	if err := r.q.QueryRow(ctx, `SELECT COALESCE(SUM(confirmed), 0)::bigint, COALESCE(SUM(duplicates), 0)::bigint FROM (
			SELECT confirmed, duplicates FROM compacted_effects WHERE `+cond+`
			UNION ALL
			SELECT (state = 'succeeded')::int, duplicate_effects FROM tombstones WHERE `+cond+` AND NOT counted
		) c`, tenant).Scan(&compactedConfirmed, &compactedDup); err != nil {
		return nil, fmt.Errorf("stats: %w", mapErr(err))
	}
	st.ConfirmedEffects += int(compactedConfirmed)
	st.DuplicateEffects += int(compactedDup)

	rows, err := r.q.Query(ctx, `SELECT destination, outcome, SUM(n)::bigint FROM (
			SELECT destination, outcome, COUNT(*) AS n
			FROM attempts WHERE `+cond+` GROUP BY destination, outcome
			UNION ALL
			SELECT destination, outcome, count AS n FROM compacted_attempts WHERE `+cond+`
		) t GROUP BY destination, outcome ORDER BY destination, outcome`, tenant)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", mapErr(err))
	}
	for rows.Next() {
		var c store.AttemptCount
		var n int64
		if err := rows.Scan(&c.Destination, &c.Outcome, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("stats: %w", err)
		}
		c.Count = int(n)
		st.Attempts = append(st.Attempts, c)
	}
	rows.Close()

	var count, total int64
	if err := r.q.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(waited), 0)::bigint FROM recoveries WHERE `+cond,
		tenant).Scan(&count, &total); err != nil {
		return nil, fmt.Errorf("stats: %w", mapErr(err))
	}
	st.Recoveries = int(count)
	st.RecoveryTotal = time.Duration(total) * time.Microsecond
	if count > 0 {
		var p90 int64
		if err := r.q.QueryRow(ctx, `SELECT waited FROM recoveries WHERE `+cond+`
			ORDER BY waited LIMIT 1 OFFSET $2`, tenant, (count*9+9)/10-1).Scan(&p90); err != nil {
			return nil, fmt.Errorf("stats: %w", mapErr(err))
		}
		st.RecoveryP90 = time.Duration(p90) * time.Microsecond
	}
	st.RecoveryBuckets = make([]int, len(buckets))
	for i, b := range buckets {
		var n int64
		if err := r.q.QueryRow(ctx, `SELECT COUNT(*) FROM recoveries WHERE `+cond+` AND waited <= $2`,
			tenant, b.Microseconds()).Scan(&n); err != nil {
			return nil, fmt.Errorf("stats: %w", mapErr(err))
		}
		st.RecoveryBuckets[i] = int(n)
	}
	return st, nil
}
