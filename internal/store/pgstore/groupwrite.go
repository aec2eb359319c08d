package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/internal/store"
)

// Group commit of conditional writes.
//
// WriteConditional queues the caller's decision. A few committer
// goroutines, each on its own pooled connection, take whatever is queued
// (up to maxGroup decisions) and write it in one transaction of two round
// trips, however many callers it serves. A caller alone in
// WriteConditional writes its decision itself, the same way, as a group of
// one: it has no one to share a commit with, and the hand-off to a
// committer and back would cost two goroutine wake-ups per transition. A
// transaction:
//
//  1. BEGIN and the clock;
//  2. every caller's writes as one statement each, then COMMIT.
//
// A caller's statement is a chain of data-modifying CTEs led by its
// operation write, which carries the condition (ON CONFLICT DO NOTHING and
// no tombstone for an insert, the previous revision for an update); the
// caller's other writes select from it, so when the condition fails none
// of them happens and the statement reports zero rows: that caller gets
// store.ErrConflict and the others are untouched. Any other failure aborts
// the shared transaction; its callers are then written again one by one,
// so that each gets its own outcome. A caller returns once the COMMIT
// covering its writes has returned (synchronous_commit stays on).

// committers is how many shared transactions may be in flight at once,
// besides the one of a caller writing alone. More overlap round trips with
// the server's work; fewer make larger groups. The pool must have room for
// them beside ordinary transactions.
const committers = 2

// maxGroup bounds the callers of one shared transaction.
const maxGroup = 64

// condRequest is one caller's queued decision.
type condRequest struct {
	decide func(time.Time) ([]store.Write, error)
	// state is requestQueued until a committer takes the request or its
	// caller gives up waiting for that.
	state atomic.Int32
	err   error
	// panicked is what decide panicked with, re-raised by the caller.
	panicked any
	done     chan struct{}
}

const (
	requestQueued int32 = iota
	requestTaken
	requestAbandoned
)

// groupWriter runs the committers of a store.
type groupWriter struct {
	s     *Store
	queue chan *condRequest
	start sync.Once
	stop  chan struct{}
	wg    sync.WaitGroup
	// closed is set by close; later requests fail with store.ErrClosed.
	closed atomic.Bool
	// callers counts the callers inside WriteConditional; one alone
	// writes its decision itself.
	callers atomic.Int32
}

func newGroupWriter(s *Store) *groupWriter {
	return &groupWriter{s: s, queue: make(chan *condRequest, 4*maxGroup), stop: make(chan struct{})}
}

// WriteConditional implements store.ConditionalWriter with group commit.
// A caller whose ctx ends while its decision is still queued leaves
// without writing; once a committer has taken it, the caller waits for the
// outcome, so that an error never hides a committed write. A caller alone
// writes its decision itself, in the same kind of transaction.
func (s *Store) WriteConditional(ctx context.Context, decide func(now time.Time) ([]store.Write, error)) (err error) {
	defer func() { err = s.settled(err) }()
	g := s.group
	if g.closed.Load() {
		return store.ErrClosed
	}
	g.start.Do(func() {
		for range committers {
			g.wg.Add(1)
			go g.commit()
		}
	})
	r := &condRequest{decide: decide, done: make(chan struct{})}
	defer g.callers.Add(-1)
	if g.callers.Add(1) == 1 {
		// Alone: write the group of one here. Like a queued request, it
		// is not written once its ctx has ended, and its statements run
		// without ctx once begun.
		if err := ctx.Err(); err != nil {
			return err
		}
		r.state.Store(requestTaken)
		g.write([]*condRequest{r})
		return r.outcome()
	}
	select {
	case g.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.stop:
		return store.ErrClosed
	}
	var gaveUp error
	select {
	case <-r.done:
	case <-ctx.Done():
		gaveUp = ctx.Err()
	case <-g.stop:
		gaveUp = store.ErrClosed
	}
	if gaveUp != nil && r.state.CompareAndSwap(requestQueued, requestAbandoned) {
		return gaveUp
	}
	<-r.done
	return r.outcome()
}

// outcome is what the caller of a finished request gets.
func (r *condRequest) outcome() error {
	if r.panicked != nil {
		panic(r.panicked) // decide's panic, in the caller's goroutine
	}
	return r.err
}

// close stops the committers once they have written what they took; the
// callers of requests still queued give up with store.ErrClosed.
func (g *groupWriter) close() {
	if g.closed.Swap(true) {
		return
	}
	g.start.Do(func() {}) // no committer starts after this
	close(g.stop)
	g.wg.Wait()
}

// decideAt calls decide, turning a panic into an error for the group and
// keeping it for the caller.
func (r *condRequest) decideAt(now time.Time) (ws []store.Write, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.panicked = p
			err = fmt.Errorf("conditional write: decision panicked: %v", p)
		}
	}()
	return r.decide(now)
}

func (r *condRequest) finish(err error) {
	r.err = err
	close(r.done)
}

// commit is one committer: it takes a group of queued requests and writes
// them, until the store closes.
func (g *groupWriter) commit() {
	defer g.wg.Done()
	group := make([]*condRequest, 0, maxGroup)
	for {
		group = group[:0]
		select {
		case r := <-g.queue:
			group = g.take(group, r)
		case <-g.stop:
			return
		}
	drain:
		for len(group) < maxGroup {
			select {
			case r := <-g.queue:
				group = g.take(group, r)
			default:
				break drain
			}
		}
		if len(group) > 0 {
			g.write(group)
		}
	}
}

// take adds r to group unless its caller has given up.
func (g *groupWriter) take(group []*condRequest, r *condRequest) []*condRequest {
	if r.state.CompareAndSwap(requestQueued, requestTaken) {
		return append(group, r)
	}
	return group
}

// groupLockTimeout bounds how long a statement of a shared transaction
// waits for a row lock (lock_timeout, for that transaction only), and
// groupDecisionAge how long after its clock reading the transaction may
// commit the decisions made at it: see transaction.
const (
	groupLockTimeout = "200ms"
	groupDecisionAge = 200 * time.Millisecond
)

// groupTimeout bounds one shared transaction. Its statements run without
// any caller's cancellation: one caller giving up must not abort the
// others' writes.
const groupTimeout = time.Minute

// write writes group in one transaction and tells every caller its
// outcome; if the transaction fails as a whole, each caller is written
// again on its own.
func (g *groupWriter) write(group []*condRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	errs, err := g.transaction(ctx, group)
	if err != nil && len(group) > 1 {
		for _, r := range group {
			g.write([]*condRequest{r})
		}
		return
	}
	for i, r := range group {
		if err != nil {
			r.finish(err)
		} else {
			r.finish(errs[i])
		}
	}
}

// transaction runs one shared transaction for group. It returns each
// caller's own outcome (nil, store.ErrConflict or decide's error) when the
// transaction committed, and an error when it did not.
func (g *groupWriter) transaction(ctx context.Context, group []*condRequest) ([]error, error) {
	conn, err := g.s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", mapErr(err))
	}
	defer conn.Release()
	// BEGIN and the clock in one round trip, as pipelinedGet sends them;
	// the callers' statements go out as the transaction's pending writes,
	// ahead of COMMIT, in the second.
	c := &connTx{conn: conn, newest: g.s.newest}
	p := c.pipeline()
	p.b.Queue(`SELECT clock_timestamp(), set_config('lock_timeout', '` + groupLockTimeout + `', true)`)
	br, err := p.send(ctx)
	var clock pgtype.Timestamptz
	if err == nil {
		var lockTimeout string
		err = br.QueryRow().Scan(&clock, &lockTimeout)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		c.rollback(ctx)
		return nil, fmt.Errorf("begin: %w", lostBeforeCommit(mapErr(err)))
	}
	now := fromTS(clock)
	// The callers decide at now, read before their statements run and
	// wait for any lock. A wait longer than groupLockTimeout fails the
	// transaction, and so does the last statement before COMMIT once
	// groupDecisionAge has passed since now (waits add up, over the
	// statements and the rows of one): store.ErrConflict, and each caller
	// decides again, on its own, at a new time; a caller that still waits
	// then falls back to the ordinary path, which reads the clock once it
	// holds the lock. So no decision on a lease's or a protection's end is
	// written later than groupDecisionAge after the time it was made at.

	errs := make([]error, len(group))
	written := make([]int64, len(group)) // operation rows each statement wrote
	for i, r := range group {
		ws, err := r.decideAt(now)
		if err == nil {
			var sql string
			var args []any
			if sql, args, err = conditionalStatement(ws); err == nil {
				c.pending = append(c.pending, pgWrite{what: "conditional write", sql: sql, args: args, scan: []any{&written[i]}})
			}
		}
		errs[i] = err
	}
	// Divides by zero once the decisions are older than groupDecisionAge:
	// clock_timestamp() is read when the statement runs, never folded.
	var inTime int64
	c.pending = append(c.pending, pgWrite{what: "check the decisions' age",
		sql: `SELECT 1 / (clock_timestamp() <= $1)::int`, args: []any{ts(now.Add(groupDecisionAge))}, scan: []any{&inTime}})
	if err := c.commit(ctx); err != nil {
		c.rollback(ctx)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "22012") { // groupLockTimeout, groupDecisionAge
			return nil, fmt.Errorf("commit: %w: %w", store.ErrConflict, err)
		}
		return nil, fmt.Errorf("commit: %w", mapErr(err))
	}
	for i, n := range written {
		if errs[i] == nil && n != 1 {
			errs[i] = fmt.Errorf("conditional write: %w", store.ErrConflict)
		}
	}
	g.s.committed(len(group))
	return errs, nil
}

// opColumnTypes are the types of opColumns, in order, for parameters that
// PostgreSQL cannot type from a target column.
var opColumnTypes = []string{"text", "text", "text", "text", "bigint", "text", "bytea", "text[]",
	"text", "text", "boolean", "text", "text", "text", "boolean",
	"timestamptz", "integer", "bigint", "text", "timestamptz",
	"timestamptz", "timestamptz", "timestamptz", "boolean", "text", "bytea", "text",
	"integer", "bigint", "timestamptz", "timestamptz", "timestamptz", "timestamptz", "bytea"}

var attemptColumnTypes = []string{"text", "text", "text", "integer", "bigint", "text", "boolean", "timestamptz",
	"timestamptz", "timestamptz", "timestamptz", "text", "text", "bytea", "text", "boolean", "text", "text", "bigint"}

const timelineColumns = `tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence`

var timelineColumnTypes = []string{"text", "text", "timestamptz", "text", "text", "text", "text", "text", "text"}

// conditionalSQL caches the statement of each shape of write set.
var conditionalSQL sync.Map // shape string → string

// conditionalStatement returns one statement that performs ws, as
// store.ConditionalWriter describes, and selects the number of operation
// rows it wrote: 1, or 0 when the condition failed and nothing was
// written.
func conditionalStatement(ws []store.Write) (string, []any, error) {
	ow, err := store.OperationWrite(ws)
	if err != nil {
		return "", nil, err
	}
	var shape strings.Builder
	var args []any
	if ow.InsertOperation != nil {
		shape.WriteByte('I')
		args = opArgs(ow.InsertOperation)
	} else {
		shape.WriteByte('U')
		args = append(opArgs(ow.UpdateOperation), ow.PrevRevision)
	}
	for _, w := range ws {
		switch {
		case w.InsertAttempt != nil:
			shape.WriteByte('a')
			args = append(args, insertAttemptWrite(w.InsertAttempt).args...)
		case w.UpdateAttempt != nil:
			shape.WriteByte('u')
			args = append(args, updateAttemptWrite(w.UpdateAttempt).args...)
		case w.AppendTimeline != nil:
			shape.WriteByte('t')
			args = append(args, appendTimelineWrite(w.AppendTimeline).args...)
		case w.InsertOperation != nil, w.UpdateOperation != nil:
		default:
			return "", nil, errors.New("conditional write: empty write")
		}
	}
	key := shape.String()
	if sql, ok := conditionalSQL.Load(key); ok {
		return sql.(string), args, nil
	}
	sql := buildConditionalSQL(key)
	conditionalSQL.Store(key, sql)
	return sql, args, nil
}

// buildConditionalSQL builds the statement of a shape: I or U (the
// operation write), then a (insert attempt), u (update attempt) and t
// (timeline entry) in the order of their arguments. Timeline entries are
// inserted in their order, so their IDs keep it.
func buildConditionalSQL(shape string) string {
	next := 1
	params := func(n int, types []string) []string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = "$" + strconv.Itoa(next+i)
			if types != nil {
				ps[i] += "::" + types[i]
			}
		}
		next += n
		return ps
	}
	var b strings.Builder
	b.WriteString("WITH op AS (")
	if shape[0] == 'I' {
		ps := params(len(opColumnList), opColumnTypes)
		fmt.Fprintf(&b, `INSERT INTO operations (%s) SELECT %s
			WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE tenant = $1 AND key = $2)
			ON CONFLICT (tenant, key) DO NOTHING RETURNING tenant AS op_tenant, key AS op_key`, opColumns, strings.Join(ps, ", "))
	} else {
		ps := params(len(opColumnList)+1, nil)
		sets := make([]string, 0, len(opColumnList)-2)
		for i, c := range opColumnList[2:] {
			sets = append(sets, c+" = "+ps[i+2])
		}
		fmt.Fprintf(&b, `UPDATE operations SET %s WHERE tenant = $1 AND key = $2 AND revision = %s RETURNING 1`,
			strings.Join(sets, ", "), ps[len(ps)-1])
	}
	b.WriteString(")")
	var timeline []string
	for i, k := range shape[1:] {
		switch k {
		case 'a':
			ps := params(len(attemptColumnTypes), attemptColumnTypes)
			fmt.Fprintf(&b, ",\nw%d AS (INSERT INTO attempts (%s) SELECT %s FROM op)", i, attemptColumns, strings.Join(ps, ", "))
		case 'u':
			ps := params(12, nil)
			fmt.Fprintf(&b, `,
w%d AS (UPDATE attempts SET dispatched_at = %s, finished_at = %s, outcome = %s, destination_ref = %s,
	response = %s, error = %s, stale = %s, lease_expires_at = %s, late_outcome = %s FROM op
	WHERE tenant = %s AND key = %s AND id = %s)`,
				i, ps[0], ps[1], ps[2], ps[3], ps[4], ps[5], ps[6], ps[7], ps[8], ps[9], ps[10], ps[11])
		case 't':
			ps := params(len(timelineColumnTypes), timelineColumnTypes)
			timeline = append(timeline, "("+strings.Join(ps, ", ")+", "+strconv.Itoa(len(timeline))+")")
		}
	}
	if len(timeline) > 0 {
		fmt.Fprintf(&b, `,
tl AS (INSERT INTO timeline (%[1]s) SELECT %[1]s FROM (VALUES %[2]s) AS v(%[1]s, ord) CROSS JOIN op ORDER BY v.ord)`,
			timelineColumns, strings.Join(timeline, ", "))
	}
	b.WriteString("\nSELECT count(*) FROM op")
	if shape[0] == 'I' {
		// The tombstone check above reads the statement's snapshot; a
		// compaction of the key that committed while the insert waited
		// on the row it deleted is not in it. opledger_no_tombstone
		// looks again with a fresh snapshot and aborts if so.
		b.WriteString(" WHERE opledger_no_tombstone(op_tenant, op_key)")
	}
	return b.String()
}

var _ store.ConditionalWriter = (*Store)(nil)
