package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
)

// A write transaction runs on one pooled connection with plain BEGIN and
// COMMIT statements rather than pgx.Tx, so that BEGIN can travel in the same
// round trip as the transaction's first statements (pgx pipelines a batch:
// every statement is sent before the first result is read). The hot path of
// the ledger then costs two round trips per transition: one for BEGIN, the
// row lock (SELECT … FOR UPDATE) and the clock; one for all its writes
// (WriteBatch, held back until then) and COMMIT. A Report reads the attempt
// in between: three.
//
// Writes held back by WriteBatch go out ahead of the transaction's next
// statement, or with COMMIT. Their checks then run in the server: a
// conditional UPDATE that matched no row fails its statement (division by
// zero on the count of updated rows), which aborts the transaction, so the
// COMMIT pipelined behind it cannot commit the writes before it.

const beginSQL = `BEGIN ISOLATION LEVEL READ COMMITTED`

// A write transaction starts, right behind BEGIN and in its round trip,
// with the schema guard: it takes a lock on schema_migrations that
// Migrate's (EXCLUSIVE) waits for, and that waits for Migrate's, then
// fails (division by zero) if a newer release has migrated the schema
// past the newest migration this build embeds. This build's writes are
// made for its own schema: a process of it that was running when a newer
// release migrated the schema stops writing (store.ErrSchemaNewer) rather
// than write what the newer schema no longer means, and no migration
// commits while one of its transactions is under way. Taking that lock
// first, before any table the transaction writes, keeps the order in
// which Migrate takes its locks, so the two never deadlock.
const (
	schemaLockSQL  = `LOCK TABLE schema_migrations IN ROW SHARE MODE`
	schemaGuardSQL = `SELECT 1 / (COALESCE(MAX(version), 0) <= $1)::int FROM schema_migrations`
)

// connTx is a transaction on one pooled connection. It implements querier;
// BEGIN is sent lazily, ahead of the first statement.
type connTx struct {
	conn *pgxpool.Conn
	// newest is the newest migration this build embeds, for the schema
	// guard.
	newest int
	// begun is set once BEGIN has been sent, acknowledged or not: from then
	// on the transaction must end with COMMIT or ROLLBACK.
	begun bool
	// pending are writes held back by WriteBatch, not yet sent.
	pending []pgWrite
	// effects are the effects of compacted operations by tenant, added to
	// the running totals just before COMMIT (addEffects).
	effects map[string]effectCounts
}

// begin sends BEGIN and the pending writes if they have not been sent yet.
func (c *connTx) begin(ctx context.Context) error {
	if c.begun && len(c.pending) == 0 {
		return nil
	}
	br, err := c.pipeline().send(ctx)
	if err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("write batch: %w", mapErr(err))
	}
	return nil
}

func (c *connTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := c.begin(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return c.conn.Exec(ctx, sql, args...)
}

func (c *connTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := c.begin(ctx); err != nil {
		return nil, err
	}
	return c.conn.Query(ctx, sql, args...)
}

func (c *connTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := c.begin(ctx); err != nil {
		return errRow{err}
	}
	return c.conn.QueryRow(ctx, sql, args...)
}

// errRow is a pgx.Row that only fails.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// pipeline is a batch on the transaction's connection, led by BEGIN when
// the transaction has not begun and by the pending writes.
type pipeline struct {
	c         *connTx
	b         pgx.Batch
	withBegin bool
	pending   []pgWrite
}

func (c *connTx) pipeline() *pipeline {
	p := &pipeline{c: c, pending: c.pending}
	c.pending = nil
	if !c.begun {
		p.b.Queue(beginSQL)
		p.b.Queue(schemaLockSQL)
		p.b.Queue(schemaGuardSQL, c.newest)
		p.withBegin = true
	}
	for _, w := range p.pending {
		p.b.Queue(w.sql, w.args...)
	}
	return p
}

// guardLockErr explains a role refused the schema guard's lock: the
// table's privileges allow ROW SHARE only with UPDATE, DELETE or TRUNCATE
// on PostgreSQL 15 and older (INSERT too from 16), where a role that only
// reads schema_migrations would have every write refused with a bare
// "permission denied".
func guardLockErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
		return fmt.Errorf("%w; every write transaction locks schema_migrations IN ROW SHARE MODE, "+
			"which needs UPDATE on it (GRANT SELECT, UPDATE ON schema_migrations TO the role; "+
			"opledger never writes it outside a migration; docs/configuration.md, PostgreSQL roles)", err)
	}
	return mapErr(err)
}

// send sends the batch in one round trip and consumes the results of BEGIN
// and of the pending writes; the caller reads the others in order and
// closes the results.
func (p *pipeline) send(ctx context.Context) (pgx.BatchResults, error) {
	if p.withBegin {
		p.c.begun = true
	}
	br := p.c.conn.SendBatch(ctx, &p.b)
	if p.withBegin {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("begin: %w", mapErr(err))
		}
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("begin: lock schema_migrations: %w", guardLockErr(err))
		}
		var one int
		if err := br.QueryRow().Scan(&one); err != nil {
			_ = br.Close()
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero: a newer schema
				return nil, p.c.newerSchema(ctx)
			}
			return nil, fmt.Errorf("begin: read schema version: %w", mapErr(err))
		}
	}
	for _, w := range p.pending {
		if err := w.read(br); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

// newerSchema ends a transaction that the schema guard aborted and
// returns the refusal, naming the schema's version if it can read it.
func (c *connTx) newerSchema(ctx context.Context) error {
	c.rollback(context.WithoutCancel(ctx))
	current := 0 // unknown, unless read below
	if !c.begun {
		_ = c.conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current)
	}
	return migrate.Newer(current, c.newest)
}

// commit ends the transaction, sending the pending writes ahead of COMMIT
// in the same round trip. COMMIT of a transaction that an error had
// already aborted answers ROLLBACK without an error: that is a failure too.
func (c *connTx) commit(ctx context.Context) error {
	for _, tenant := range slices.Sorted(maps.Keys(c.effects)) { // one order: no two transactions deadlock on them
		if e := c.effects[tenant]; e != (effectCounts{}) {
			c.pending = append(c.pending, addEffectsWrite(tenant, e))
		}
	}
	c.effects = nil
	if !c.begun && len(c.pending) == 0 {
		return nil // no statement ran: nothing to commit
	}
	p := c.pipeline()
	p.b.Queue(`COMMIT`)
	br, err := p.send(ctx)
	if err != nil {
		return err
	}
	defer br.Close()
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	c.begun = false
	if tag.String() != "COMMIT" {
		return pgx.ErrTxCommitRollback
	}
	return br.Close()
}

// rollback ends the transaction without its writes; pending writes are
// dropped unsent. If ROLLBACK fails, the connection is left inside a
// transaction and the pool destroys it on release rather than reuse it.
func (c *connTx) rollback(ctx context.Context) {
	c.pending, c.effects = nil, nil
	if !c.begun {
		return
	}
	if _, err := c.conn.Exec(ctx, `ROLLBACK`); err == nil {
		c.begun = false
	}
}

// pgWrite is one write statement with how to read its result.
type pgWrite struct {
	what string
	sql  string
	args []any
	// none, when set, is the error if the statement changed no row.
	none error
	// scan, when set, reads the statement's one row (RETURNING).
	scan []any
	// asserted: the statement itself fails when it changed no row.
	asserted bool
}

// asserting returns w rewritten so that the database fails it when it
// changes no row, for sending ahead of statements that must not run then
// (a write written to assert already is left as it is).
func (w pgWrite) asserting() pgWrite {
	if w.none == nil || w.asserted {
		return w
	}
	var n int64
	w.sql = `WITH w AS (` + w.sql + ` RETURNING 1) SELECT 1 / count(*) FROM w`
	w.scan, w.asserted = []any{&n}, true
	return w
}

func (w pgWrite) finish(tag pgconn.CommandTag, err error) error {
	var pe *pgconn.PgError
	if w.asserted && errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero: no row
		return w.none
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.what, mapErr(err))
	}
	if w.none != nil && !w.asserted && tag.RowsAffected() != 1 {
		return w.none
	}
	return nil
}

// run performs w on q.
func (w pgWrite) run(ctx context.Context, q querier) error {
	if w.scan != nil {
		return w.finish(pgconn.CommandTag{}, q.QueryRow(ctx, w.sql, w.args...).Scan(w.scan...))
	}
	return w.finish(q.Exec(ctx, w.sql, w.args...))
}

// read reads w's result from a batch.
func (w pgWrite) read(br pgx.BatchResults) error {
	if w.scan != nil {
		return w.finish(pgconn.CommandTag{}, br.QueryRow().Scan(w.scan...))
	}
	return w.finish(br.Exec())
}

func toPgWrite(w store.Write) (pgWrite, error) {
	switch {
	case w.InsertAttempt != nil:
		return insertAttemptWrite(w.InsertAttempt), nil
	case w.UpdateAttempt != nil:
		return updateAttemptWrite(w.UpdateAttempt), nil
	case w.InsertOperation != nil:
		return insertOperationWrite(w.InsertOperation), nil
	case w.UpdateOperation != nil:
		return updateOperationWrite(w.UpdateOperation, w.PrevRevision), nil
	case w.AppendTimeline != nil:
		return appendTimelineWrite(w.AppendTimeline), nil
	}
	return pgWrite{}, errors.New("write batch: empty write")
}

// WriteBatch holds ws back and sends them, in order, in the round trip of
// the transaction's next statement or of its COMMIT. A failing write
// aborts the transaction, so nothing after it takes effect; its error (as
// the single call would return it: store.ErrConflict for a lost revision,
// …) then comes from that next statement or from Update. Timeline IDs are
// set once the writes have been sent.
func (t *pgTx) WriteBatch(ctx context.Context, ws []store.Write) error {
	pws := make([]pgWrite, 0, len(ws))
	for _, w := range ws {
		pw, err := toPgWrite(w)
		if err != nil {
			return err
		}
		pws = append(pws, pw)
	}
	return t.later(ctx, pws...)
}

// later holds ws back to go out, in order, in the round trip of the
// transaction's next statement or of its COMMIT (WriteBatch, and the
// writes whose results nobody reads); outside a write transaction it runs
// them at once, one after the other.
func (t *pgTx) later(ctx context.Context, ws ...pgWrite) error {
	if t.c == nil {
		for _, w := range ws {
			if err := w.run(ctx, t.q); err != nil {
				return err
			}
		}
		return nil
	}
	for _, w := range ws {
		t.c.pending = append(t.c.pending, w.asserting())
	}
	return nil
}
