package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

const eventColumns = `tenant, source, event_id, type, occurred_at, payload_sha256, rule, status, reason,
	object_key, order_value, operations, received_at`

func scanEvent(sc scanner) (*store.Event, error) {
	var e store.Event
	var occurred, received int64
	var ops string
	if err := sc.Scan(&e.Tenant, &e.Source, &e.EventID, &e.Type, &occurred, &e.PayloadSHA256, &e.Rule,
		&e.Status, &e.Reason, &e.ObjectKey, &e.OrderValue, &ops, &received); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(ops), &e.Operations); err != nil {
		return nil, fmt.Errorf("decode operations of event %s: %w", e.EventID, err)
	}
	if e.Operations == nil {
		e.Operations = []string{}
	}
	e.OccurredAt, e.ReceivedAt = fromMicros(occurred), fromMicros(received)
	return &e, nil
}

// GetEvent reads one event.
func (r *sqlReader) GetEvent(ctx context.Context, tenant, source, eventID string) (*store.Event, error) {
	e, err := scanEvent(r.q.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM events
		WHERE tenant = ? AND source = ? AND event_id = ?`, tenant, source, eventID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event: %w", err)
	}
	return e, nil
}

// ListEvents lists a tenant's events newest first, filtered and paged by
// (received_at, source, event_id).
func (r *sqlReader) ListEvents(ctx context.Context, p store.EventListParams) ([]*store.Event, error) {
	where := []string{"tenant = ?"}
	args := []any{p.Tenant}
	if p.Source != "" {
		where = append(where, "source = ?")
		args = append(args, p.Source)
	}
	if p.Status != "" {
		where = append(where, "status = ?")
		args = append(args, p.Status)
	}
	if !p.AfterReceivedAt.IsZero() {
		c := toMicros(p.AfterReceivedAt)
		where = append(where, "(received_at < ? OR (received_at = ? AND (source < ? OR (source = ? AND event_id < ?))))")
		args = append(args, c, c, p.AfterSource, p.AfterSource, p.AfterEventID)
	}
	args = append(args, p.Limit)
	rows, err := r.q.QueryContext(ctx, `SELECT `+eventColumns+` FROM events WHERE `+strings.Join(where, " AND ")+
		` ORDER BY received_at DESC, source DESC, event_id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
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
	return out, rows.Err()
}

// ListDeliveries lists the arrivals of an event, oldest first.
func (r *sqlReader) ListDeliveries(ctx context.Context, tenant, source, eventID string) ([]*store.Delivery, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT id, tenant, source, event_id, delivery_id, received_at, duplicate, payload_sha256
		FROM deliveries WHERE tenant = ? AND source = ? AND event_id = ? ORDER BY id`, tenant, source, eventID)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		var d store.Delivery
		var received int64
		var dup int
		if err := rows.Scan(&d.ID, &d.Tenant, &d.Source, &d.EventID, &d.DeliveryID, &received, &dup, &d.PayloadSHA256); err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		d.ReceivedAt, d.Duplicate = fromMicros(received), dup != 0
		out = append(out, &d)
	}
	return out, rows.Err()
}

// GetEventObject reads the tracked position of an object. The write
// transaction already holds SQLite's only write lock.
func (r *sqlReader) GetEventObject(ctx context.Context, tenant, source, objectKey string) (*store.EventObject, error) {
	var o store.EventObject
	var updated int64
	err := r.q.QueryRowContext(ctx, `SELECT tenant, source, object_key, order_value, event_id, revision, updated_at
		FROM event_objects WHERE tenant = ? AND source = ? AND object_key = ?`, tenant, source, objectKey).
		Scan(&o.Tenant, &o.Source, &o.ObjectKey, &o.OrderValue, &o.EventID, &o.Revision, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get event object: %w", err)
	}
	o.UpdatedAt = fromMicros(updated)
	return &o, nil
}

// EventCounts counts events by status (all received, and those still
// stored) and deliveries ("" for all tenants).
func (r *sqlReader) EventCounts(ctx context.Context, tenant string) (*store.EventCounts, error) {
	out := &store.EventCounts{ByStatus: map[string]int{}, KeptByStatus: map[string]int{}}
	cond, args := tenantFilter("tenant", tenant)
	rows, err := r.q.QueryContext(ctx, `SELECT status, COUNT(*) FROM events WHERE `+cond+` GROUP BY status`, args...)
	if err != nil {
		return nil, fmt.Errorf("count events: %w", err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("count events: %w", err)
		}
		out.ByStatus[s], out.KeptByStatus[s] = n, n
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("count events: %w", err)
	}
	if err := r.q.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(duplicate), 0) FROM deliveries WHERE `+cond, args...).
		Scan(&out.Deliveries, &out.DuplicateDeliveries); err != nil {
		return nil, fmt.Errorf("count deliveries: %w", err)
	}
	// What retention deleted (ForgetEventsBefore, CompactDeliveriesBefore).
	rows, err = r.q.QueryContext(ctx, `SELECT status, SUM(events), SUM(deliveries), SUM(duplicate_deliveries)
		FROM compacted_events WHERE `+cond+` GROUP BY status`, args...)
	if err != nil {
		return nil, fmt.Errorf("count compacted events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var events, deliveries, duplicates int
		if err := rows.Scan(&s, &events, &deliveries, &duplicates); err != nil {
			return nil, fmt.Errorf("count compacted events: %w", err)
		}
		if events > 0 {
			out.ByStatus[s] += events
		}
		out.Deliveries += deliveries
		out.DuplicateDeliveries += duplicates
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count compacted events: %w", err)
	}
	return out, nil
}

const workflowColumns = `tenant, key, fingerprint, definition, owner, current_step, current_key, done,
	revision, created_at, updated_at`

// GetWorkflow reads a workflow.
func (r *sqlReader) GetWorkflow(ctx context.Context, tenant, key string) (*store.Workflow, error) {
	w, err := scanWorkflow(r.q.QueryRowContext(ctx, `SELECT `+workflowColumns+` FROM workflows WHERE tenant = ? AND key = ?`, tenant, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow: %w", err)
	}
	return w, nil
}

// ListWorkflows lists a tenant's workflows by key.
func (r *sqlReader) ListWorkflows(ctx context.Context, p store.WorkflowListParams) ([]*store.Workflow, error) {
	where := []string{"tenant = ?", "key > ?"}
	args := []any{p.Tenant, p.AfterKey}
	if p.Prefix != "" {
		// Keys are ASCII letters, digits and . _ : / -, all below '~'.
		where = append(where, "key >= ?", "key < ?")
		args = append(args, p.Prefix, p.Prefix+"~")
	}
	if p.Open {
		where = append(where, "done = 0")
	}
	args = append(args, p.Limit)
	rows, err := r.q.QueryContext(ctx, `SELECT `+workflowColumns+` FROM workflows WHERE `+strings.Join(where, " AND ")+
		` ORDER BY key LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
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
	return out, rows.Err()
}

// scanWorkflow reads one row of workflowColumns.
func scanWorkflow(sc scanner) (*store.Workflow, error) {
	var w store.Workflow
	var done int
	var created, updated int64
	err := sc.Scan(&w.Tenant, &w.Key, &w.Fingerprint, &w.Definition, &w.Owner, &w.CurrentStep, &w.CurrentKey, &done,
		&w.Revision, &created, &updated)
	if err != nil {
		return nil, err
	}
	w.Done = done != 0
	w.CreatedAt, w.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &w, nil
}

// WorkflowsReady lists open workflows whose current step has succeeded,
// of tenant or (empty) of all tenants, by (tenant, key) after the
// position after (of a tenant's, only its key counts). A tenant's are
// read by equality on the tenant, so that neither index walks into the
// tenants after it.
func (r *sqlReader) WorkflowsReady(ctx context.Context, tenant string, after store.OperationID, limit int) ([]store.OperationID, error) {
	const ready = `w.done = 0 AND w.current_key != '' AND (
			EXISTS (SELECT 1 FROM operations o WHERE o.tenant = w.tenant AND o.key = w.current_key AND o.state = 'succeeded')
			OR EXISTS (SELECT 1 FROM tombstones t WHERE t.tenant = w.tenant AND t.key = w.current_key AND t.state = 'succeeded'))`
	if tenant != "" {
		return r.ids(ctx, "list ready workflows", `SELECT w.tenant, w.key FROM workflows w
			WHERE w.tenant = ? AND w.key > ? AND `+ready+`
			ORDER BY w.key LIMIT ?`, tenant, after.Key, limit)
	}
	return r.ids(ctx, "list ready workflows", `SELECT w.tenant, w.key FROM workflows w
		WHERE (w.tenant > ? OR (w.tenant = ? AND w.key > ?)) AND `+ready+`
		ORDER BY w.tenant, w.key LIMIT ?`, after.Tenant, after.Tenant, after.Key, limit)
}

// InsertEvent inserts a new event; store.ErrConflict if it exists.
func (t *sqlTx) InsertEvent(ctx context.Context, e *store.Event) error {
	ops := e.Operations
	if ops == nil {
		ops = []string{}
	}
	ob, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encode event operations: %w", err)
	}
	_, err = t.q.ExecContext(ctx, `INSERT INTO events (`+eventColumns+`) VALUES (`+placeholders(13)+`)`,
		e.Tenant, e.Source, e.EventID, e.Type, toMicros(e.OccurredAt), e.PayloadSHA256, e.Rule, e.Status, e.Reason,
		e.ObjectKey, e.OrderValue, string(ob), toMicros(e.ReceivedAt))
	if err != nil {
		return fmt.Errorf("insert event: %w", mapErr(err))
	}
	return nil
}

// UpdateEvent writes the outcome of an event this transaction inserted.
func (t *sqlTx) UpdateEvent(ctx context.Context, e *store.Event) error {
	ops := e.Operations
	if ops == nil {
		ops = []string{}
	}
	ob, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encode event operations: %w", err)
	}
	res, err := t.q.ExecContext(ctx, `UPDATE events SET rule = ?, status = ?, reason = ?, object_key = ?, order_value = ?,
		operations = ? WHERE tenant = ? AND source = ? AND event_id = ?`,
		e.Rule, e.Status, e.Reason, e.ObjectKey, e.OrderValue, string(ob), e.Tenant, e.Source, e.EventID)
	if err != nil {
		return fmt.Errorf("update event: %w", mapErr(err))
	}
	if n, err := res.RowsAffected(); err == nil && n != 1 {
		return fmt.Errorf("update event: %d rows for %s/%s", n, e.Source, e.EventID)
	}
	return nil
}

// InsertDelivery appends an arrival and sets its ID.
func (t *sqlTx) InsertDelivery(ctx context.Context, d *store.Delivery) error {
	res, err := t.q.ExecContext(ctx, `INSERT INTO deliveries (tenant, source, event_id, delivery_id, received_at, duplicate, payload_sha256)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, d.Tenant, d.Source, d.EventID, d.DeliveryID, toMicros(d.ReceivedAt),
		boolInt(d.Duplicate), d.PayloadSHA256)
	if err != nil {
		return fmt.Errorf("insert delivery: %w", mapErr(err))
	}
	if id, err := res.LastInsertId(); err == nil {
		d.ID = id
	}
	return nil
}

// InsertEventObject inserts a tracked object; store.ErrConflict if it exists.
func (t *sqlTx) InsertEventObject(ctx context.Context, o *store.EventObject) error {
	_, err := t.q.ExecContext(ctx, `INSERT INTO event_objects (tenant, source, object_key, order_value, event_id, revision, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, o.Tenant, o.Source, o.ObjectKey, o.OrderValue, o.EventID, o.Revision, toMicros(o.UpdatedAt))
	if err != nil {
		return fmt.Errorf("insert event object: %w", mapErr(err))
	}
	return nil
}

// UpdateEventObject writes o if its revision is still prevRevision.
func (t *sqlTx) UpdateEventObject(ctx context.Context, o *store.EventObject, prevRevision int64) error {
	res, err := t.q.ExecContext(ctx, `UPDATE event_objects SET order_value = ?, event_id = ?, revision = ?, updated_at = ?
		WHERE tenant = ? AND source = ? AND object_key = ? AND revision = ?`,
		o.OrderValue, o.EventID, o.Revision, toMicros(o.UpdatedAt), o.Tenant, o.Source, o.ObjectKey, prevRevision)
	if err != nil {
		return fmt.Errorf("update event object: %w", mapErr(err))
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("update event object: %w", store.ErrConflict)
	}
	return nil
}

// LockOperationKey does nothing: SQLite's write transactions run one at a
// time (BEGIN IMMEDIATE).
func (t *sqlTx) LockOperationKey(context.Context, string, string) error { return nil }

// EventObjectExists reports whether an object is tracked.
func (t *sqlTx) EventObjectExists(ctx context.Context, tenant, source, objectKey string) (bool, error) {
	return t.exists(ctx, "event object", `SELECT EXISTS (SELECT 1 FROM event_objects
		WHERE tenant = ? AND source = ? AND object_key = ?)`, tenant, source, objectKey)
}

// WorkflowExists reports whether a workflow is stored.
func (t *sqlTx) WorkflowExists(ctx context.Context, tenant, key string) (bool, error) {
	return t.exists(ctx, "workflow", `SELECT EXISTS (SELECT 1 FROM workflows WHERE tenant = ? AND key = ?)`, tenant, key)
}

// OperationExists reports whether an operation is stored at key.
func (t *sqlTx) OperationExists(ctx context.Context, tenant, key string) (bool, error) {
	return t.exists(ctx, "operation", `SELECT EXISTS (SELECT 1 FROM operations WHERE tenant = ? AND key = ?)`, tenant, key)
}

// exists runs q, a SELECT EXISTS, and returns its answer; what names
// the row in an error. The write transaction already holds SQLite's only
// write lock: there is nothing to lock.
func (t *sqlTx) exists(ctx context.Context, what, q string, args ...any) (bool, error) {
	var ok bool
	if err := t.q.QueryRowContext(ctx, q, args...).Scan(&ok); err != nil {
		return false, fmt.Errorf("%s exists: %w", what, err)
	}
	return ok, nil
}

// InsertWorkflow inserts a new workflow; store.ErrConflict if it exists.
func (t *sqlTx) InsertWorkflow(ctx context.Context, w *store.Workflow) error {
	_, err := t.q.ExecContext(ctx, `INSERT INTO workflows (`+workflowColumns+`) VALUES (`+placeholders(11)+`)`,
		w.Tenant, w.Key, w.Fingerprint, w.Definition, w.Owner, w.CurrentStep, w.CurrentKey, boolInt(w.Done),
		w.Revision, toMicros(w.CreatedAt), toMicros(w.UpdatedAt))
	if err != nil {
		return fmt.Errorf("insert workflow: %w", mapErr(err))
	}
	return nil
}

// UpdateWorkflow writes w if its revision is still prevRevision.
func (t *sqlTx) UpdateWorkflow(ctx context.Context, w *store.Workflow, prevRevision int64) error {
	res, err := t.q.ExecContext(ctx, `UPDATE workflows SET fingerprint = ?, definition = ?, owner = ?, current_step = ?,
		current_key = ?, done = ?, revision = ?, updated_at = ? WHERE tenant = ? AND key = ? AND revision = ?`,
		w.Fingerprint, w.Definition, w.Owner, w.CurrentStep, w.CurrentKey, boolInt(w.Done), w.Revision,
		toMicros(w.UpdatedAt), w.Tenant, w.Key, prevRevision)
	if err != nil {
		return fmt.Errorf("update workflow: %w", mapErr(err))
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("update workflow %s: %w", w.Key, store.ErrConflict)
	}
	return nil
}

// foldDeliveriesSQL adds the deliveries that match the condition (the
// second %s) to their tenants' compacted counts, under the empty status;
// the first %s may name the index to read them by.
const foldDeliveriesSQL = `INSERT INTO compacted_events (tenant, status, deliveries, duplicate_deliveries)
	SELECT tenant, '', COUNT(*), SUM(duplicate) FROM deliveries %s WHERE %s GROUP BY tenant
	ON CONFLICT (tenant, status) DO UPDATE SET deliveries = deliveries + excluded.deliveries,
		duplicate_deliveries = duplicate_deliveries + excluded.duplicate_deliveries`

// CompactDeliveriesBefore folds and deletes the oldest deliveries received
// before t. The store's one writer runs it, so the batch its statements
// select is the same in each.
func (t *sqlTx) CompactDeliveriesBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	const batch = `id IN (SELECT id FROM deliveries WHERE received_at < ? ORDER BY received_at, id LIMIT ?)`
	if _, err := t.q.ExecContext(ctx, fmt.Sprintf(foldDeliveriesSQL, "", batch), toMicros(before), limit); err != nil {
		return 0, fmt.Errorf("compact deliveries: %w", err)
	}
	res, err := t.q.ExecContext(ctx, `DELETE FROM deliveries WHERE `+batch, toMicros(before), limit)
	if err != nil {
		return 0, fmt.Errorf("compact deliveries: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// ForgetEventsBefore folds and deletes the oldest events received before t
// and their deliveries. The deliveries are read by their event: without
// ANALYZE statistics SQLite would rather range over every delivery of the
// tenant.
func (t *sqlTx) ForgetEventsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	const batch = `(tenant, source, event_id) IN (SELECT tenant, source, event_id FROM events
		WHERE received_at < ? ORDER BY received_at, tenant, source, event_id LIMIT ?)`
	args := []any{toMicros(before), limit}
	for _, q := range []string{
		fmt.Sprintf(foldDeliveriesSQL, "INDEXED BY deliveries_event", batch),
		`INSERT INTO compacted_events (tenant, status, events)
			SELECT tenant, status, COUNT(*) FROM events WHERE ` + batch + ` GROUP BY tenant, status
			ON CONFLICT (tenant, status) DO UPDATE SET events = events + excluded.events`,
		`DELETE FROM deliveries INDEXED BY deliveries_event WHERE ` + batch,
	} {
		if _, err := t.q.ExecContext(ctx, q, args...); err != nil {
			return 0, fmt.Errorf("forget events: %w", err)
		}
	}
	res, err := t.q.ExecContext(ctx, `DELETE FROM events WHERE `+batch, args...)
	if err != nil {
		return 0, fmt.Errorf("forget events: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// ForgetEventObjectsBefore deletes the tracked objects last updated before t.
func (t *sqlTx) ForgetEventObjectsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := t.q.ExecContext(ctx, `DELETE FROM event_objects WHERE (tenant, source, object_key) IN (
		SELECT tenant, source, object_key FROM event_objects WHERE updated_at < ? ORDER BY updated_at LIMIT ?)`,
		toMicros(before), limit)
	if err != nil {
		return 0, fmt.Errorf("forget event objects: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// ForgetWorkflowsBefore deletes the finished workflows last updated before t.
func (t *sqlTx) ForgetWorkflowsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := t.q.ExecContext(ctx, `DELETE FROM workflows WHERE (tenant, key) IN (
		SELECT tenant, key FROM workflows WHERE done = 1 AND updated_at < ? ORDER BY updated_at LIMIT ?)`,
		toMicros(before), limit)
	if err != nil {
		return 0, fmt.Errorf("forget workflows: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
