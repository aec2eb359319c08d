package sqlitestore

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStatements bounds the statement cache: queries built from
// filters come in a few shapes, never unboundedly many.
const maxCachedStatements = 256

// stmtCache keeps one prepared statement per SQL text, so that SQLite
// parses each query once instead of on every call (parsing was the largest
// single cost of a claim before the cache).
type stmtCache struct {
	prepare func(ctx context.Context, query string) (*sql.Stmt, error)
	mu      sync.Mutex
	m       map[string]*sql.Stmt
}

// preparer is what *sql.DB and *sql.Conn have in common.
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

func newStmtCache(p preparer) *stmtCache {
	return &stmtCache{prepare: p.PrepareContext, m: map[string]*sql.Stmt{}}
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		// Closed (the store was closed while a caller, a readiness probe
		// left running, still wrote): the unprepared call reports it.
		return nil, false
	}
	if st, ok := c.m[query]; ok {
		return st, true
	}
	if len(c.m) >= maxCachedStatements {
		return nil, false
	}
	st, err := c.prepare(ctx, query)
	if err != nil {
		return nil, false // the unprepared call reports the error
	}
	c.m[query] = st
	return st, true
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for _, st := range c.m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	c.m = nil
	return first
}

// cachedQuerier runs queries through the statement cache. Write
// transactions are plain BEGIN … COMMIT statements on the writer
// connection, whose statements the cache holds; no sql.Tx is involved (its
// StmtContext would prepare each cached statement again on every call).
type cachedQuerier struct {
	cache *stmtCache
	plain querier // the pool or the writer connection, for uncached calls
	// detach runs statements without the caller's cancellation: in a
	// shared transaction an interrupted statement would make SQLite roll
	// back every caller's writes.
	detach bool
}

// context is the context a statement runs under: ctx, detached from its
// cancellation when q detaches. A context that can never be cancelled
// (its Done is nil: context.Background, or one detached already, as the
// batch's own statements and the proxy's claims run under) has nothing
// to detach from and is used as it is, rather than wrapped again on
// every statement.
func (q *cachedQuerier) context(ctx context.Context) context.Context {
	if q.detach && ctx.Done() != nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// stmt is the cached statement of query, prepared under ctx (already
// q.context's) when it is new.
func (q *cachedQuerier) stmt(ctx context.Context, query string) (*sql.Stmt, bool) {
	st, ok := q.cache.get(ctx, query)
	if !ok {
		return nil, false
	}
	return st, true
}

func (q *cachedQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = q.context(ctx)
	if st, ok := q.stmt(ctx, query); ok {
		return st.ExecContext(ctx, args...)
	}
	return q.plain.ExecContext(ctx, query, args...)
}

func (q *cachedQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = q.context(ctx)
	if st, ok := q.stmt(ctx, query); ok {
		return st.QueryContext(ctx, args...)
	}
	return q.plain.QueryContext(ctx, query, args...)
}

func (q *cachedQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = q.context(ctx)
	if st, ok := q.stmt(ctx, query); ok {
		return st.QueryRowContext(ctx, args...)
	}
	return q.plain.QueryRowContext(ctx, query, args...)
}
