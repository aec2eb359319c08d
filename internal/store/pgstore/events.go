package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/opledger/opledger/internal/store"
)

const eventColumns = `tenant, source, event_id, type, occurred_at, payload_sha256, rule, status, reason,
	object_key, order_value, operations, received_at`

func scanEvent(row pgx.Row) (*store.Event, error) {
	var e store.Event
	var occurred, received pgtype.Timestamptz
	if err := row.Scan(&e.Tenant, &e.Source, &e.EventID, &e.Type, &occurred, &e.PayloadSHA256, &e.Rule,
		&e.Status, &e.Reason, &e.ObjectKey, &e.OrderValue, &e.Operations, &received); err != nil {
		return nil, err
	}
	if e.Operations == nil {
		e.Operations = []string{}
	}
	e.OccurredAt, e.ReceivedAt = fromTS(occurred), fromTS(received)
	return &e, nil
}

// GetEvent reads one event.
func (r *reader) GetEvent(ctx context.Context, tenant, source, eventID string) (*store.Event, error) {
	e, err := scanEvent(r.q.QueryRow(ctx, `SELECT `+eventColumns+` FROM events
		WHERE tenant = $1 AND source = $2 AND event_id = $3`, tenant, source, eventID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event: %w", mapErr(err))
	}
	return e, nil
}

// ListEvents lists a tenant's events newest first, filtered and paged by
// (received_at, source, event_id).
func (r *reader) ListEvents(ctx context.Context, p store.EventListParams) ([]*store.Event, error) {
	args := []any{p.Tenant}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"tenant = $1"}
	if p.Source != "" {
		where = append(where, "source = "+arg(p.Source))
	}
	if p.Status != "" {
		where = append(where, "status = "+arg(p.Status))
	}
	if !p.AfterReceivedAt.IsZero() {
		where = append(where, "(received_at, source, event_id) < ("+arg(ts(p.AfterReceivedAt))+", "+
			arg(p.AfterSource)+", "+arg(p.AfterEventID)+")")
	}
	q := `SELECT ` + eventColumns + ` FROM events WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY received_at DESC, source DESC, event_id DESC LIMIT ` + arg(p.Limit)
	rows, err := r.q.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", mapErr(err))
	}
	return out, nil
}

// ListDeliveries lists the arrivals of an event, oldest first.
func (r *reader) ListDeliveries(ctx context.Context, tenant, source, eventID string) ([]*store.Delivery, error) {
	rows, err := r.q.Query(ctx, `SELECT id, tenant, source, event_id, delivery_id, received_at, duplicate, payload_sha256
		FROM deliveries WHERE tenant = $1 AND source = $2 AND event_id = $3 ORDER BY id`, tenant, source, eventID)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		var d store.Delivery
		var received pgtype.Timestamptz
		if err := rows.Scan(&d.ID, &d.Tenant, &d.Source, &d.EventID, &d.DeliveryID, &received, &d.Duplicate, &d.PayloadSHA256); err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		d.ReceivedAt = fromTS(received)
		out = append(out, &d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: %w", mapErr(err))
	}
	return out, nil
}

// GetEventObject reads the tracked position of an object. Inside a write
// transaction it locks the row, so decisions about one object queue.
func (r *reader) GetEventObject(ctx context.Context, tenant, source, objectKey string) (*store.EventObject, error) {
	q := `SELECT tenant, source, object_key, order_value, event_id, revision, updated_at
		FROM event_objects WHERE tenant = $1 AND source = $2 AND object_key = $3`
	if r.inTx {
		q += ` FOR UPDATE`
	}
	var o store.EventObject
	var updated pgtype.Timestamptz
	err := r.q.QueryRow(ctx, q, tenant, source, objectKey).
		Scan(&o.Tenant, &o.Source, &o.ObjectKey, &o.OrderValue, &o.EventID, &o.Revision, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event object: %w", mapErr(err))
	}
	o.UpdatedAt = fromTS(updated)
	return &o, nil
}

// EventCounts counts events by status (all received, and those still
// stored) and deliveries ("" for all tenants).
func (r *reader) EventCounts(ctx context.Context, tenant string) (*store.EventCounts, error) {
	out := &store.EventCounts{ByStatus: map[string]int{}, KeptByStatus: map[string]int{}}
	cond := tenantIs(tenant)
	rows, err := r.q.Query(ctx, `SELECT status, COUNT(*) FROM events WHERE `+cond+` GROUP BY status`, tenant)
	if err != nil {
		return nil, fmt.Errorf("count events: %w", mapErr(err))
	}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count events: %w", err)
		}
		out.ByStatus[s], out.KeptByStatus[s] = int(n), int(n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count events: %w", mapErr(err))
	}
	var total, dup int64
	if err := r.q.QueryRow(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE duplicate) FROM deliveries
		WHERE `+cond, tenant).Scan(&total, &dup); err != nil {
		return nil, fmt.Errorf("count deliveries: %w", mapErr(err))
	}
	out.Deliveries, out.DuplicateDeliveries = int(total), int(dup)
	// What retention deleted (ForgetEventsBefore, CompactDeliveriesBefore).
	rows, err = r.q.Query(ctx, `SELECT status, SUM(events)::bigint, SUM(deliveries)::bigint, SUM(duplicate_deliveries)::bigint
		FROM compacted_events WHERE `+cond+` GROUP BY status`, tenant)
	if err != nil {
		return nil, fmt.Errorf("count compacted events: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var events, deliveries, duplicates int64
		if err := rows.Scan(&s, &events, &deliveries, &duplicates); err != nil {
			return nil, fmt.Errorf("count compacted events: %w", err)
		}
		if events > 0 {
			out.ByStatus[s] += int(events)
		}
		out.Deliveries += int(deliveries)
		out.DuplicateDeliveries += int(duplicates)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count compacted events: %w", mapErr(err))
	}
	return out, nil
}

const workflowColumns = `tenant, key, fingerprint, definition, owner, current_step, current_key, done,
	revision, created_at, updated_at`

// GetWorkflow reads a workflow. Inside a write transaction it locks the row
// (FOR UPDATE), so advances and revisions of one workflow queue.
func (r *reader) GetWorkflow(ctx context.Context, tenant, key string) (*store.Workflow, error) {
	q := `SELECT ` + workflowColumns + ` FROM workflows WHERE tenant = $1 AND key = $2`
	if r.inTx {
		q += ` FOR UPDATE`
	}
	w, err := scanWorkflow(r.q.QueryRow(ctx, q, tenant, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow: %w", mapErr(err))
	}
	return w, nil
}

// ListWorkflows lists a tenant's workflows by key.
func (r *reader) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]*store.Workflow, error) {
	args := []any{p.Tenant, p.AfterKey}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where := []string{"tenant = $1", "key > $2"}
	if p.Prefix != "" {
		// Keys are ASCII letters, digits and . _ : / -, all below '~',
		// and compare bytewise (COLLATE "C").
		where = append(where, "key >= "+arg(p.Prefix), "key < "+arg(p.Prefix+"~"))
	}
	if p.Open {
		where = append(where, "NOT done")
	}
	q := `SELECT ` + workflowColumns + ` FROM workflows WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY key LIMIT ` + arg(p.Limit)
	rows, err := r.q.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", mapErr(err))
	}
	defer rows.Close()
	var out []*store.Workflow
	for rows.Next() {
		w, err := scanWorkflow(rows)
		if err != nil {
			return nil, fmt.Errorf("list workflows: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workflows: %w", mapErr(err))
	}
	return out, nil
}

// scanWorkflow reads one row of workflowColumns.
func scanWorkflow(row pgx.Row) (*store.Workflow, error) {
	var w store.Workflow
	var current int32
	var created, updated pgtype.Timestamptz
	err := row.Scan(&w.Tenant, &w.Key, &w.Fingerprint, &w.Definition, &w.Owner,
		&current, &w.CurrentKey, &w.Done, &w.Revision, &created, &updated)
	if err != nil {
		return nil, err
	}
	w.CurrentStep = int(current)
	w.CreatedAt, w.UpdatedAt = fromTS(created), fromTS(updated)
	return &w, nil
}

// WorkflowsReady lists open workflows whose current step has succeeded,
// of tenant or (empty) of all tenants, by (tenant, key) after the
// position after (of a tenant's, only its key counts). A tenant's are
// read by equality on the tenant, so that neither index walks into the
// tenants after it.
func (r *reader) WorkflowsReady(ctx context.Context, tenant string, after store.OperationID, limit int) ([]store.OperationID, error) {
	const ready = `NOT w.done AND w.current_key <> '' AND (
			EXISTS (SELECT 1 FROM operations o WHERE o.tenant = w.tenant AND o.key = w.current_key AND o.state = 'succeeded')
			OR EXISTS (SELECT 1 FROM tombstones t WHERE t.tenant = w.tenant AND t.key = w.current_key AND t.state = 'succeeded'))`
	if tenant != "" {
		return r.ids(ctx, "list ready workflows", `SELECT w.tenant, w.key FROM workflows w
			WHERE w.tenant = $1 AND w.key > $2 AND `+ready+`
			ORDER BY w.key LIMIT $3`, tenant, after.Key, limit)
	}
	return r.ids(ctx, "list ready workflows", `SELECT w.tenant, w.key FROM workflows w
		WHERE (w.tenant, w.key) > ($1, $2) AND `+ready+`
		ORDER BY w.tenant, w.key LIMIT $3`, after.Tenant, after.Key, limit)
}

// InsertEvent inserts a new event; store.ErrConflict if it exists.
func (t *pgTx) InsertEvent(ctx context.Context, e *store.Event) error {
	ops := e.Operations
	if ops == nil {
		ops = []string{}
	}
	_, err := t.q.Exec(ctx, `INSERT INTO events (`+eventColumns+`) VALUES (`+placeholders(1, 13)+`)`,
		e.Tenant, e.Source, e.EventID, e.Type, ts(e.OccurredAt), e.PayloadSHA256, e.Rule, e.Status, e.Reason,
		e.ObjectKey, e.OrderValue, ops, ts(e.ReceivedAt))
	if err != nil {
		return fmt.Errorf("insert event: %w", mapErr(err))
	}
	return nil
}

// UpdateEvent writes the outcome of an event this transaction inserted.
func (t *pgTx) UpdateEvent(ctx context.Context, e *store.Event) error {
	ops := e.Operations
	if ops == nil {
		ops = []string{}
	}
	tag, err := t.q.Exec(ctx, `UPDATE events SET rule = $1, status = $2, reason = $3, object_key = $4, order_value = $5,
		operations = $6 WHERE tenant = $7 AND source = $8 AND event_id = $9`,
		e.Rule, e.Status, e.Reason, e.ObjectKey, e.OrderValue, ops, e.Tenant, e.Source, e.EventID)
	if err != nil {
		return fmt.Errorf("update event: %w", mapErr(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("update event: %d rows for %s/%s", tag.RowsAffected(), e.Source, e.EventID)
	}
	return nil
}

// InsertDelivery appends an arrival and sets its ID.
func (t *pgTx) InsertDelivery(ctx context.Context, d *store.Delivery) error {
	err := t.q.QueryRow(ctx, `INSERT INTO deliveries (tenant, source, event_id, delivery_id, received_at, duplicate, payload_sha256)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, d.Tenant, d.Source, d.EventID, d.DeliveryID,
		ts(d.ReceivedAt), d.Duplicate, d.PayloadSHA256).Scan(&d.ID)
	if err != nil {
		return fmt.Errorf("insert delivery: %w", mapErr(err))
	}
	return nil
}

// InsertEventObject inserts a tracked object; store.ErrConflict if it exists.
func (t *pgTx) InsertEventObject(ctx context.Context, o *store.EventObject) error {
	_, err := t.q.Exec(ctx, `INSERT INTO event_objects (tenant, source, object_key, order_value, event_id, revision, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, o.Tenant, o.Source, o.ObjectKey, o.OrderValue, o.EventID, o.Revision, ts(o.UpdatedAt))
	if err != nil {
		return fmt.Errorf("insert event object: %w", mapErr(err))
	}
	return nil
}

// UpdateEventObject writes o if its revision is still prevRevision.
func (t *pgTx) UpdateEventObject(ctx context.Context, o *store.EventObject, prevRevision int64) error {
	tag, err := t.q.Exec(ctx, `UPDATE event_objects SET order_value = $1, event_id = $2, revision = $3, updated_at = $4
		WHERE tenant = $5 AND source = $6 AND object_key = $7 AND revision = $8`,
		o.OrderValue, o.EventID, o.Revision, ts(o.UpdatedAt), o.Tenant, o.Source, o.ObjectKey, prevRevision)
	if err != nil {
		return fmt.Errorf("update event object: %w", mapErr(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("update event object: %w", store.ErrConflict)
	}
	return nil
}

// EventObjectExists reports whether an object is tracked. Unlike
// GetEventObject in a write transaction, it locks nothing.
func (t *pgTx) EventObjectExists(ctx context.Context, tenant, source, objectKey string) (bool, error) {
	return t.exists(ctx, "event object", `SELECT EXISTS (SELECT 1 FROM event_objects
		WHERE tenant = $1 AND source = $2 AND object_key = $3)`, tenant, source, objectKey)
}

// WorkflowExists reports whether a workflow is stored. Unlike GetWorkflow
// in a write transaction, it locks nothing.
func (t *pgTx) WorkflowExists(ctx context.Context, tenant, key string) (bool, error) {
	return t.exists(ctx, "workflow", `SELECT EXISTS (SELECT 1 FROM workflows WHERE tenant = $1 AND key = $2)`, tenant, key)
}

// OperationExists reports whether an operation is stored at key. Unlike
// GetOperation in a write transaction, it locks nothing.
func (t *pgTx) OperationExists(ctx context.Context, tenant, key string) (bool, error) {
	return t.exists(ctx, "operation", `SELECT EXISTS (SELECT 1 FROM operations WHERE tenant = $1 AND key = $2)`, tenant, key)
}

// exists runs q, a plain SELECT EXISTS (no FOR UPDATE), and returns its
// answer; what names the row in an error.
func (t *pgTx) exists(ctx context.Context, what, q string, args ...any) (bool, error) {
	var ok bool
	if err := t.q.QueryRow(ctx, q, args...).Scan(&ok); err != nil {
		return false, fmt.Errorf("%s exists: %w", what, mapErr(err))
	}
	return ok, nil
}

// LockOperationKey takes a transaction-level advisory lock on the
// operation key: PostgreSQL cannot lock a row that does not exist yet.
// Keys whose hashes collide share a lock: they only wait for each other.
func (t *pgTx) LockOperationKey(ctx context.Context, tenant, key string) error {
	// Tenants and keys hold no control characters: the unit separator
	// keeps ("a", "b:c") and ("a:b", "c") apart.
	if _, err := t.q.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "operation\x1f"+tenant+"\x1f"+key); err != nil {
		return fmt.Errorf("lock operation key: %w", mapErr(err))
	}
	return nil
}

// InsertWorkflow inserts a new workflow; store.ErrConflict if it exists.
func (t *pgTx) InsertWorkflow(ctx context.Context, w *store.Workflow) error {
	_, err := t.q.Exec(ctx, `INSERT INTO workflows (`+workflowColumns+`) VALUES (`+placeholders(1, 11)+`)`,
		w.Tenant, w.Key, w.Fingerprint, w.Definition, w.Owner, int32(w.CurrentStep), w.CurrentKey, w.Done,
		w.Revision, ts(w.CreatedAt), ts(w.UpdatedAt))
	if err != nil {
		return fmt.Errorf("insert workflow: %w", mapErr(err))
	}
	return nil
}

// UpdateWorkflow writes w if its revision is still prevRevision.
func (t *pgTx) UpdateWorkflow(ctx context.Context, w *store.Workflow, prevRevision int64) error {
	tag, err := t.q.Exec(ctx, `UPDATE workflows SET fingerprint = $1, definition = $2, owner = $3, current_step = $4,
		current_key = $5, done = $6, revision = $7, updated_at = $8 WHERE tenant = $9 AND key = $10 AND revision = $11`,
		w.Fingerprint, w.Definition, w.Owner, int32(w.CurrentStep), w.CurrentKey, w.Done, w.Revision,
		ts(w.UpdatedAt), w.Tenant, w.Key, prevRevision)
	if err != nil {
		return fmt.Errorf("update workflow: %w", mapErr(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("update workflow %s: %w", w.Key, store.ErrConflict)
	}
	return nil
}

// foldCountsSQL adds the counts of rows named counts (tenant, status,
// events, deliveries, duplicates) to compacted_events, in the order of
// tenants and statuses: one lock order for concurrent runs (in the
// aggregate's order, two processes' runs deadlocked).
const foldCountsSQL = `INSERT INTO compacted_events (tenant, status, events, deliveries, duplicate_deliveries)
	SELECT tenant, status, SUM(events), SUM(deliveries), SUM(duplicates) FROM counts GROUP BY tenant, status
	ORDER BY tenant, status
	ON CONFLICT (tenant, status) DO UPDATE SET events = compacted_events.events + excluded.events,
		deliveries = compacted_events.deliveries + excluded.deliveries,
		duplicate_deliveries = compacted_events.duplicate_deliveries + excluded.duplicate_deliveries`

// CompactDeliveriesBefore folds and deletes the oldest deliveries received
// before t. Only the rows this statement deleted are counted, and rows
// another transaction holds are skipped, so compactions running at once
// never count a delivery twice.
func (t *pgTx) CompactDeliveriesBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := t.q.QueryRow(ctx, `WITH batch AS (
			SELECT id FROM deliveries WHERE received_at < $1 ORDER BY received_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
		), gone AS (
			DELETE FROM deliveries d USING batch WHERE d.id = batch.id RETURNING d.tenant, d.duplicate
		), counts AS (
			SELECT tenant, ''::text AS status, 0::bigint AS events, COUNT(*) AS deliveries,
				COUNT(*) FILTER (WHERE duplicate) AS duplicates FROM gone GROUP BY tenant
		), folded AS (`+foldCountsSQL+`)
		SELECT COUNT(*) FROM gone`, ts(before), limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("compact deliveries: %w", mapErr(err))
	}
	return int(n), nil
}

// ForgetEventsBefore folds and deletes the oldest events received before t
// and their deliveries, counting only what this statement deleted.
func (t *pgTx) ForgetEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := t.q.QueryRow(ctx, `WITH batch AS (
			SELECT tenant, source, event_id FROM events WHERE received_at < $1
			ORDER BY received_at, tenant, source, event_id LIMIT $2 FOR UPDATE SKIP LOCKED
		), gone_events AS (
			DELETE FROM events e USING batch b
			WHERE e.tenant = b.tenant AND e.source = b.source AND e.event_id = b.event_id
			RETURNING e.tenant, e.status
		), gone_deliveries AS (
			DELETE FROM deliveries d USING batch b
			WHERE d.tenant = b.tenant AND d.source = b.source AND d.event_id = b.event_id
			RETURNING d.tenant, d.duplicate
		), counts AS (
			SELECT tenant, status, COUNT(*) AS events, 0::bigint AS deliveries, 0::bigint AS duplicates
			FROM gone_events GROUP BY tenant, status
			UNION ALL
			SELECT tenant, '', 0, COUNT(*), COUNT(*) FILTER (WHERE duplicate) FROM gone_deliveries GROUP BY tenant
		), folded AS (`+foldCountsSQL+`)
		SELECT COUNT(*) FROM gone_events`, ts(before), limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("forget events: %w", mapErr(err))
	}
	return int(n), nil
}

// ForgetEventObjectsBefore deletes the tracked objects last updated before t.
func (t *pgTx) ForgetEventObjectsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM event_objects WHERE (tenant, source, object_key) IN (
		SELECT tenant, source, object_key FROM event_objects WHERE updated_at < $1 ORDER BY updated_at LIMIT $2
		FOR UPDATE SKIP LOCKED)`, ts(before), limit)
	if err != nil {
		return 0, fmt.Errorf("forget event objects: %w", mapErr(err))
	}
	return int(tag.RowsAffected()), nil
}

// ForgetWorkflowsBefore deletes the finished workflows last updated before t.
func (t *pgTx) ForgetWorkflowsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := t.q.Exec(ctx, `DELETE FROM workflows WHERE (tenant, key) IN (
		SELECT tenant, key FROM workflows WHERE done AND updated_at < $1 ORDER BY updated_at LIMIT $2
		FOR UPDATE SKIP LOCKED)`, ts(before), limit)
	if err != nil {
		return 0, fmt.Errorf("forget workflows: %w", mapErr(err))
	}
	return int(tag.RowsAffected()), nil
}
