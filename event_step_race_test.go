package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestEventRacesWorkflowPut: a workflow stored after an event planned to
// record one of its step keys (the plan reads without a lock) but before
// the event's write takes the key's lock: the event is planned again and
// stored as a conflict, not refused with nothing of it kept.
func TestEventRacesWorkflowPut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
	}}
	_, _, err := l.PutWorkflow(ctx, "race-w0", spec) // a row to copy as "race-w"
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "race-w/b"
        action: mail.send
        destination: mail
        payload: {x: 1}
`))
	require.NoError(t, err)

	tx, wait := eventBlockedBy(t, l, dsn, rules, lockOperationKeySQL("race-w/b"), "the event, planned,")
	_, err = tx.Exec(ctx, `INSERT INTO workflows (tenant, key, fingerprint, definition, owner, current_step, current_key, done, revision, created_at, updated_at)
		SELECT tenant, 'race-w', fingerprint, definition, owner, current_step, 'race-w/a', done, revision, created_at, updated_at FROM workflows WHERE key = 'race-w0'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	res, err := wait()
	require.NoError(t, err, "the event is kept, as a conflict")
	require.Equal(t, opledger.EventConflict, res.Status)
	require.Contains(t, res.Event.Reason, "operation race-w/b is step b of workflow race-w")
	_, err = l.Get(ctx, "race-w/b")
	require.ErrorIs(t, err, opledger.ErrNotFound)
}

// TestStepKeyLockIsTheKeys: recording a key with '/' (which may be a
// workflow's step) locks that key only, on PostgreSQL: a record of
// another key under the same prefix does not wait for it (records of
// unrelated keys queued behind one another, and events that record keys
// under two prefixes in opposite orders deadlocked), while a record of
// the same key waits for the lock, so that a workflow put at once is
// ordered with it.
func TestStepKeyLockIsTheKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	holder, tx := holdingTx(t, dsn)
	lockOperationKey(t, tx, "orders/1")

	record := func(key string) chan error {
		done := make(chan error, 1)
		go func() {
			_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "erp.create", Destination: "erp", Payload: json.RawMessage(`{}`)})
			done <- err
		}()
		return done
	}
	select {
	case err := <-record("orders/2"):
		require.NoError(t, err, "another key under the same prefix")
	case <-time.After(30 * time.Second): // a guard, not a wait
		t.Fatal("orders/2 waited for the lock of orders/1")
	}

	same := record("orders/1")
	testdb.WaitBlockedBy(t, holder, "the record of orders/1")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-same)
}

// TestEventLocksWorkflowBeforeStep: on PostgreSQL, an event whose rule
// writes the key of a workflow's step reads (and locks) the workflow
// before the step's operation, in the order of every workflow
// transaction, so that it never deadlocks with one. A connection holds
// the workflow row, as revising or resuming the workflow would; the
// event waits for it, and the connection then gets the step's row at
// once. Before, the event held the step and waited for the workflow:
// the connection's NOWAIT failed (and a waiting workflow transaction
// would have deadlocked with the event until deadlock_timeout broke it).
func TestEventLocksWorkflowBeforeStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	_, _, err := l.PutWorkflow(ctx, "w", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
	_, err = l.Get(ctx, "w/a")
	require.NoError(t, err, "the workflow recorded its first step")
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "w/a"
        action: crm.create
        destination: crm
        payload: {other: content}
`))
	require.NoError(t, err)

	res := eventWaitsFor(t, l, dsn, rules, `SELECT 1 FROM workflows WHERE key = 'w' FOR UPDATE`, func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'w/a' FOR UPDATE NOWAIT`)
		require.NoError(t, err, "the step was free: the event waits for the workflow first")
	})
	require.Equal(t, opledger.EventConflict, res.Status)
	require.Contains(t, res.Event.Reason, "operation w/a is step a of workflow w")
	op, err := l.Get(ctx, "w/a")
	require.NoError(t, err)
	require.Equal(t, int64(1), op.Version, "the step keeps the workflow's content")
}

// TestPutWorkflowLocksWorkflowBeforeStep: on PostgreSQL, a new
// workflow whose step keys were locked by a put of the same workflow
// that committed meanwhile reads (and locks) the workflow before its
// steps' operations, in the order of every workflow transaction, and
// answers as a repeat. A connection holds a step key's lock, as that
// first put would; the put waits for it. The first put's workflow and
// step are then written and a second connection holds the workflow row,
// as an event whose rule writes the step's key would; the connection
// releases the key; the put waits for the workflow, and the second
// connection then gets the step's row at once. Before, the put locked
// the step's operation and then waited for the workflow: the NOWAIT
// failed (and the event, waiting for the step, deadlocked with it until
// deadlock_timeout broke it).
func TestPutWorkflowLocksWorkflowBeforeStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
	}}
	_, _, err := l.PutWorkflow(ctx, "put-w0", spec) // rows to copy as "put-w" and "put-w/a"
	require.NoError(t, err)

	holder, tx := holdingTx(t, dsn)
	defer tx.Rollback(ctx)
	lockOperationKey(t, tx, "put-w/a")

	done := make(chan error, 1)
	var created bool
	go func() {
		var err error
		_, created, err = l.PutWorkflow(ctx, "put-w", spec)
		done <- err
	}()
	testdb.WaitBlockedBy(t, holder, "the put of put-w")

	other, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close(ctx) })
	_, err = other.Exec(ctx, `INSERT INTO workflows (tenant, key, fingerprint, definition, owner, current_step, current_key, done, revision, created_at, updated_at)
		SELECT tenant, 'put-w', fingerprint, definition, owner, current_step, 'put-w/a', done, revision, created_at, updated_at FROM workflows WHERE key = 'put-w0'`)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `INSERT INTO operations SELECT (jsonb_populate_record(o, '{"key": "put-w/a"}')).* FROM operations o WHERE key = 'put-w0/a'`)
	require.NoError(t, err)
	otx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer otx.Rollback(ctx)
	var one int
	require.NoError(t, otx.QueryRow(ctx, `SELECT 1 FROM workflows WHERE key = 'put-w' FOR UPDATE`).Scan(&one))
	require.NoError(t, tx.Commit(ctx))
	testdb.WaitBlockedBy(t, other, "the put of put-w, past the key's lock,")
	_, err = otx.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'put-w/a' FOR UPDATE NOWAIT`)
	require.NoError(t, err, "the step was free: the put waits for the workflow first")
	require.NoError(t, otx.Commit(ctx))

	require.NoError(t, <-done)
	require.False(t, created, "a repeat of the workflow stored meanwhile")
}

// TestEventLocksOperationsInKeyOrder: on PostgreSQL, an event whose
// rule writes several existing operations (here with the content they
// have) locks them in key order,
// whatever the rule's order, so that two events writing the same keys in
// opposite orders queue instead of deadlocking. A connection holds "a";
// the event, whose rule writes "b" then "a", waits for it, and the
// connection then gets "b" at once. Before, the event locked "b" first
// and then waited for "a": the connection's NOWAIT failed (and an event
// writing "a" then "b" would have deadlocked with it).
func TestEventLocksOperationsInKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	for _, key := range []string{"a", "b"} {
		_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
		require.NoError(t, err)
	}
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "b"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "a"
        action: crm.update
        destination: crm
        payload: {v: 1}
`))
	require.NoError(t, err)

	res := eventWaitsFor(t, l, dsn, rules, `SELECT 1 FROM operations WHERE key = 'a' FOR UPDATE`, func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'b' FOR UPDATE NOWAIT`)
		require.NoError(t, err, "b was free: the event waits for a first")
	})
	require.Equal(t, opledger.EventApplied, res.Status, res.Event.Reason)
	require.Equal(t, []string{"b", "a"}, res.Event.OperationKeys, "in the rule's order")
}

// TestEventRecordsNewKeysInKeyOrder: on PostgreSQL, an event whose rule
// records several new keys writes them in key order, whatever the rule's
// order, so that the locks only a write can take (a new row's, the key
// lock of a key that may be a workflow's step) are taken in the order a
// new workflow put with those step keys, or another event, takes them.
// A connection holds the key lock of "new-keys/a"; the event, whose rule
// records "new-keys/b" then "new-keys/a", waits for it, and the
// connection then gets the lock of "new-keys/b" at once. Before, the
// event recorded "new-keys/b" first and then waited for "new-keys/a":
// the connection's try failed (and a put of workflow "new-keys" with
// steps a and b would have deadlocked with it). The keys are this
// test's own: a key lock is an advisory lock, which the tests running
// at once in other schemas share.
func TestEventRecordsNewKeysInKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "new-keys/b"
        action: mail.send
        destination: mail
        payload: {x: 1}
      - key: "new-keys/a"
        action: crm.create
        destination: crm
        payload: {x: 1}
`))
	require.NoError(t, err)

	res := eventWaitsFor(t, l, dsn, rules, lockOperationKeySQL("new-keys/a"), func(tx pgx.Tx) {
		var free bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`, operationKeyLock("new-keys/b")).Scan(&free))
		require.True(t, free, "new-keys/b was free: the event waits for new-keys/a first")
	})
	require.Equal(t, opledger.EventApplied, res.Status, res.Event.Reason)
	require.Equal(t, []string{"new-keys/b", "new-keys/a"}, res.Event.OperationKeys, "in the rule's order")
	for i, op := range res.Operations {
		require.Equal(t, res.Event.OperationKeys[i], op.Key)
	}
}

// receiveInBackground receives event e1 (source shop, type t) under
// rules in a goroutine of its own; wait returns what ReceiveEvent did.
func receiveInBackground(l *opledger.Ledger, rules *opledger.Rules) (wait func() (*opledger.EventResult, error)) {
	type received struct {
		res *opledger.EventResult
		err error
	}
	done := make(chan received, 1)
	go func() {
		res, err := l.ReceiveEvent(context.Background(), rules, opledger.Event{Source: "shop", EventID: "e1", Type: "t", Payload: json.RawMessage(`{}`)})
		done <- received{res, err}
	}()
	return func() (*opledger.EventResult, error) {
		r := <-done
		return r.res, r.err
	}
}

// postgresLedger opens a ledger on a fresh PostgreSQL schema and returns
// it with the schema's DSN.
func postgresLedger(t *testing.T) (*opledger.Ledger, string) {
	t.Helper()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(context.Background(), dsn, opledger.Options{Worker: "w"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, dsn
}

// holdingTx opens a connection of its own on dsn and begins a
// transaction on it, to hold locks the ledger's calls then wait for.
func holdingTx(t *testing.T, dsn string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	return conn, tx
}

// lockOperationKey takes, in tx, the lock pgstore's LockOperationKey
// takes on key of the default tenant.
func lockOperationKey(t *testing.T, tx pgx.Tx, key string) {
	t.Helper()
	_, err := tx.Exec(context.Background(), lockOperationKeySQL(key))
	require.NoError(t, err)
}

// lockOperationKeySQL is the statement that takes the lock pgstore's
// LockOperationKey takes on key of the default tenant.
func lockOperationKeySQL(key string) string {
	return `SELECT pg_advisory_xact_lock(hashtextextended('` + operationKeyLock(key) + `', 0))`
}

// operationKeyLock names the lock of key of the default tenant, as
// pgstore's LockOperationKey does.
func operationKeyLock(key string) string { return "operation\x1fdefault\x1f" + key }

// eventBlockedBy has a connection's transaction run hold, a statement
// that takes a lock, then receives an event of rules in the background
// and returns once the event waits for that lock (what names the event in
// a failure), with the transaction, rolled back at the test's end unless
// the test ended it, and the wait for the event's result.
func eventBlockedBy(t *testing.T, l *opledger.Ledger, dsn string, rules *opledger.Rules, hold, what string) (pgx.Tx, func() (*opledger.EventResult, error)) {
	t.Helper()
	ctx := context.Background()
	holder, tx := holdingTx(t, dsn)
	t.Cleanup(func() { tx.Rollback(ctx) })
	_, err := tx.Exec(ctx, hold)
	require.NoError(t, err)
	wait := receiveInBackground(l, rules)
	testdb.WaitBlockedBy(t, holder, what)
	return tx, wait
}

// eventWaitsFor checks the order in which an event takes two locks. A
// transaction of its own runs hold, which takes the first; the event
// (ReceiveEvent under rules, in the background) must then wait for it,
// and checkFree, run in that transaction while the event waits, finds the
// second free: the event had not taken it. It commits and returns what
// the event did, which must not be an error.
func eventWaitsFor(t *testing.T, l *opledger.Ledger, dsn string, rules *opledger.Rules, hold string, checkFree func(tx pgx.Tx)) *opledger.EventResult {
	t.Helper()
	ctx := context.Background()
	tx, wait := eventBlockedBy(t, l, dsn, rules, hold, "the event")
	checkFree(tx)
	require.NoError(t, tx.Commit(ctx))
	res, err := wait()
	require.NoError(t, err)
	return res
}

// TestEventObjectRecheckHoldsNoOperation: on PostgreSQL, an event that
// found its object untracked and then an operation with other content
// checks whether an event tracked the object meanwhile with a plain
// read, not by locking the object while it holds the operation (an event
// locks the object before its operations). A connection holds the
// operation; the event reads no object and waits for it. The object is
// then tracked and a second connection holds it; the first lets the
// operation go. The event must wait for the object holding nothing: the
// second connection then gets the operation at once. Before, the event
// held the operation and waited for the object: the NOWAIT failed (and
// an event for the object waiting for the operation would have
// deadlocked with it until deadlock_timeout broke it).
func TestEventObjectRecheckHoldsNoOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "recheck:sync", Action: "crm.sync", Destination: "crm", Payload: json.RawMessage(`{"v":0}`)})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    object: {kind: recheck, id: event.source, order_by: event.id}
    operations:
      - key: "recheck:sync"
        action: crm.sync
        destination: crm
        payload: {v: 1}
`))
	require.NoError(t, err)

	opTx, wait := eventBlockedBy(t, l, dsn, rules, `SELECT 1 FROM operations WHERE key = 'recheck:sync' FOR UPDATE`, "the event, past its object,")

	// An event e0 with the same order tracked the object meanwhile.
	other, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close(ctx) })
	_, err = other.Exec(ctx, `INSERT INTO event_objects (tenant, source, object_key, order_value, event_id, revision, updated_at)
		VALUES ('default', 'shop', 'recheck:shop', 'e1', 'e0', 1, now())`)
	require.NoError(t, err)
	eventWaitsNextFor(t, dsn, opTx, "the event, at its object,", "recheck:sync",
		`SELECT 1 FROM event_objects WHERE object_key = 'recheck:shop' FOR UPDATE`)

	res, err := wait()
	require.NoError(t, err)
	require.Equal(t, opledger.EventConflict, res.Status)
	require.Contains(t, res.Event.Reason, "not newer than event e0", "planned again, it saw the object")
}

// TestRepeatDeliveryLocksNoOperation: on PostgreSQL, a repeat delivery
// of an event locks none of the operations the event produced: it
// answers while another transaction holds them all, with the operations
// in the rule's order. It used to read (and lock) them inside its write,
// step operations without their workflow, and closed a circle with a
// workflow transaction that held its workflow and one of the steps
// (seen in TestSoakPostgres: a repeat of a steps event holding wf:5/a
// and waiting for wf:5/b).
func TestRepeatDeliveryLocksNoOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "dup-b"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "dup-a"
        action: crm.update
        destination: crm
        payload: {v: 1}
`))
	require.NoError(t, err)
	first, err := receiveInBackground(l, rules)()
	require.NoError(t, err)
	require.Equal(t, opledger.EventApplied, first.Status, first.Event.Reason)

	_, tx := holdingTx(t, dsn)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM operations WHERE key IN ('dup-a', 'dup-b') FOR UPDATE`)
	require.NoError(t, err)
	// A bound on the wait, so that a repeat that waits fails the test
	// rather than hang it: what is asserted is the answer.
	bounded, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := l.ReceiveEvent(bounded, rules, opledger.Event{Source: "shop", EventID: "e1", Type: "t", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err, "the repeat waited for an operation another transaction holds")
	require.True(t, res.Duplicate)
	require.Equal(t, []string{"dup-b", "dup-a"}, res.Event.OperationKeys)
	require.Len(t, res.Operations, 2)
	for i, op := range res.Operations {
		require.Equal(t, res.Event.OperationKeys[i], op.Key, "in the rule's order")
	}
}

// TestEventLocksNoWorkflowStoredSince: on PostgreSQL, an event whose rule
// writes several keys, one the key of a step of a workflow stored after
// the event read (and locked) its keys, does not lock that workflow
// while it holds operations: it is planned again and locks the workflow
// first. A connection holds the operation "since-wf-op"; the event,
// whose rule writes "since-wf/b" (no workflow yet) and "since-wf-op",
// waits for it. Workflow "since-wf" (steps a, b) is then stored and a
// second connection holds it; the first lets the operation go. The
// event must wait for the workflow holding nothing: the second
// connection then gets the operation at once. Before, the event held the
// operation and waited for the workflow: the NOWAIT failed (and a
// workflow transaction waiting for the operation would have deadlocked
// with it).
func TestEventLocksNoWorkflowStoredSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "since-wf-op", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "since-wf/b"
        action: mail.send
        destination: mail
        payload: {x: 1}
      - key: "since-wf-op"
        action: crm.update
        destination: crm
        payload: {v: 1}
`))
	require.NoError(t, err)

	opTx, wait := eventBlockedBy(t, l, dsn, rules, `SELECT 1 FROM operations WHERE key = 'since-wf-op' FOR UPDATE`, "the event, locking its keys,")

	workflowStoredWhileEventWaits(t, l, dsn, opTx, "since-wf", "b", "since-wf-op")

	res, err := wait()
	require.NoError(t, err)
	require.Equal(t, opledger.EventConflict, res.Status)
	require.Contains(t, res.Event.Reason, "operation since-wf/b is step b of workflow since-wf")
}

// TestEventLocksNoOperationRecordedSince: on PostgreSQL, an event whose
// rule writes several keys, one of them recorded after the event read
// (and locked) its keys, does not lock that operation out of key order
// while it holds another: it is planned again and locks them in key
// order. A connection holds "since-op-b"; the event, whose rule writes
// "since-op-a" (not recorded yet) and "since-op-b", waits for it.
// "since-op-a" is then recorded and a second connection holds it; the
// first lets "since-op-b" go. The event must wait for "since-op-a"
// holding nothing: the second connection then gets "since-op-b" at once.
// Before, the event held "since-op-b" and waited for "since-op-a": the
// NOWAIT failed (and an event writing both would have deadlocked with
// it).
func TestEventLocksNoOperationRecordedSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	intent := func(key string) opledger.Intent {
		return opledger.Intent{Key: key, Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)}
	}
	_, _, err := l.Record(ctx, intent("since-op-b"))
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "since-op-b"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "since-op-a"
        action: crm.update
        destination: crm
        payload: {v: 1}
`))
	require.NoError(t, err)

	bTx, wait := eventBlockedBy(t, l, dsn, rules, `SELECT 1 FROM operations WHERE key = 'since-op-b' FOR UPDATE`, "the event, locking its keys,")

	_, _, err = l.Record(ctx, intent("since-op-a"))
	require.NoError(t, err)
	eventWaitsNextFor(t, dsn, bTx, "the event, at since-op-a,", "since-op-b",
		`SELECT 1 FROM operations WHERE key = 'since-op-a' FOR UPDATE`)

	res, err := wait()
	require.NoError(t, err)
	require.Equal(t, opledger.EventApplied, res.Status, res.Event.Reason)
	require.Equal(t, []string{"since-op-b", "since-op-a"}, res.Event.OperationKeys)
}

// TestEventRecordLocksNoWorkflowStoredSince: on PostgreSQL, an event
// that planned to record a step-shaped key "w/x" while no workflow "w"
// was stored, and finds at its write that one was stored since, does not
// lock that workflow while it holds operations: it is planned again and
// locks the workflow first. The rule writes "rec-since-op" (recorded,
// same content), "rec-since0/k" and "rec-since1/x"; a connection holds
// the key lock of "rec-since0/k", which the event's write waits for
// (after the plan, holding "rec-since-op"). Workflow "rec-since1" (steps
// a, x) is then stored and a second connection holds it; the first lets
// the key lock go. The event must wait for the workflow holding
// nothing: the second connection then gets "rec-since-op" at once.
// Before, the event's write of "rec-since1/x" held "rec-since-op" and
// waited for the workflow: the NOWAIT failed (and a workflow
// transaction waiting for the operation would have deadlocked with it).
func TestEventRecordLocksNoWorkflowStoredSince(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "rec-since-op", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "rec-since1/x"
        action: mail.send
        destination: mail
        payload: {x: 1}
      - key: "rec-since0/k"
        action: mail.send
        destination: mail
        payload: {x: 1}
      - key: "rec-since-op"
        action: crm.update
        destination: crm
        payload: {v: 1}
`))
	require.NoError(t, err)

	keyTx, wait := eventBlockedBy(t, l, dsn, rules, lockOperationKeySQL("rec-since0/k"), "the event, writing rec-since0/k,")

	workflowStoredWhileEventWaits(t, l, dsn, keyTx, "rec-since1", "x", "rec-since-op")

	res, err := wait()
	require.NoError(t, err)
	require.Equal(t, opledger.EventConflict, res.Status)
	require.Contains(t, res.Event.Reason, "operation rec-since1/x is step x of workflow rec-since1")
	_, err = l.Get(ctx, "rec-since0/k")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing of the first plan kept")
}

// workflowStoredWhileEventWaits stores workflow wf (steps a and step)
// while an event waits behind blocker, holds the workflow's row, lets the
// event go on (blocker commits), and checks that the event, which must
// then wait for the workflow, holds no lock on operation free while it
// does.
func workflowStoredWhileEventWaits(t *testing.T, l *opledger.Ledger, dsn string, blocker pgx.Tx, wf, step, free string) {
	t.Helper()
	ctx := context.Background()
	_, _, err := l.PutWorkflow(ctx, wf, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: step, Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
	eventWaitsNextFor(t, dsn, blocker, "the event, at the workflow,", free, `SELECT 1 FROM workflows WHERE key = $1 FOR UPDATE`, wf)
}

// eventWaitsNextFor hands a waiting event over from blocker to a row
// that a connection of its own holds (hold, a SELECT … FOR UPDATE with
// args): it
// holds that row, commits blocker, waits until the event waits for the
// row (what names where), and checks that the event holds nothing else
// while it waits: the operation free, one the event read before, is
// locked at once with NOWAIT. It commits the row before it returns.
func eventWaitsNextFor(t *testing.T, dsn string, blocker pgx.Tx, what, free, hold string, args ...any) {
	t.Helper()
	ctx := context.Background()
	holder, tx := holdingTx(t, dsn)
	defer tx.Rollback(ctx)
	_, err := tx.Exec(ctx, hold, args...)
	require.NoError(t, err)
	require.NoError(t, blocker.Commit(ctx))
	testdb.WaitBlockedBy(t, holder, what)
	_, err = tx.Exec(ctx, `SELECT 1 FROM operations WHERE key = $1 FOR UPDATE NOWAIT`, free)
	require.NoError(t, err, "%s was free: %s waits holding nothing", free, what)
	require.NoError(t, tx.Commit(ctx))
}

// TestRepeatDeliveryWaitsHoldingNothing: on PostgreSQL, a delivery of
// an event whose first delivery is still being written waits for that
// delivery's event row before it plans, holding no lock. A connection
// inserts the event's row, as the first delivery does first, and keeps
// its transaction open; the second delivery waits for it. The
// workflow its rule names and the step key it would record must then be
// free. Before, the second delivery planned first and held the workflow
// while it waited: with a workflow put holding the step key and waiting
// for the workflow, and the first delivery waiting for that step key,
// the three deadlocked (seen once in TestSoakPostgres).
func TestRepeatDeliveryWaitsHoldingNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := postgresLedger(t)
	_, _, err := l.PutWorkflow(ctx, "w", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "w/a"
        action: crm.create
        destination: crm
        payload: {}
`))
	require.NoError(t, err)

	tx, wait := eventBlockedBy(t, l, dsn, rules, `INSERT INTO events (tenant, source, event_id, type, payload_sha256, status, received_at)
		VALUES ('default', 'shop', 'e1', 't', 'first delivery', 'applied', now())`, "the second delivery, at the event row,")
	_, err = tx.Exec(ctx, `SELECT 1 FROM workflows WHERE key = 'w' FOR UPDATE NOWAIT`)
	require.NoError(t, err, "the workflow was free: the delivery waits for the event row before it plans")
	var free bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`, operationKeyLock("w/a")).Scan(&free))
	require.True(t, free, "the step key was free")
	_, err = tx.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'w/a' FOR UPDATE NOWAIT`)
	require.NoError(t, err, "the step's operation was free")

	// The first delivery gives up: the second is the event's first.
	require.NoError(t, tx.Rollback(ctx))
	res, err := wait()
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.Equal(t, opledger.EventApplied, res.Status, res.Event.Reason)
	require.Equal(t, []string{"w/a"}, res.Event.OperationKeys)
}

// TestEventNewKeyStoredSincePlanNotWaitedFor: on PostgreSQL, an event
// that planned to record a key with no operation, and holds a key that
// sorts after it, does not wait for that key's row when one was stored
// since and another transaction holds it: it gives the plan up and is
// planned again, taking the row's lock in key order. The event waits
// after its plan (a connection holds its deliveries table); meanwhile the
// key is recorded, and a second connection locks it and then the key the
// event holds. Waiting, the event closed a circle with that connection
// (seen in TestSoakPostgres: two order events, one recording ord:5,
// which another's plan had just found missing, while it held ord:5/ship).
func TestEventNewKeyStoredSincePlanNotWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := ledgerFoundInCircles(t)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "nw-b", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "nw-b"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "nw-a"
        action: crm.create
        destination: crm
        payload: {x: 1}
`))
	require.NoError(t, err)

	waitsAfterPlan(t, l, dsn, rules, func(tx pgx.Tx) {
		// Recorded since the event's plan, and held.
		_, _, err := l.Record(ctx, opledger.Intent{Key: "nw-a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"x":1}`)})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'nw-a' FOR UPDATE`)
		require.NoError(t, err)
	}, []string{`SELECT 1 FROM operations WHERE key = 'nw-b' FOR UPDATE`}, []string{"nw-b", "nw-a"})
}

// TestEventTombstoneRecordedSincePlanNotWaitedFor: on PostgreSQL, an
// event that found a key's tombstone with its content (nothing to do
// there), and holds a key that sorts after it, does not lock a row
// recorded at that key since: the tombstone was forgotten and the key
// recorded again after the plan, and another transaction holds the new
// row and waits for the key the event holds. The event gives its plan up
// and is planned again. It used to read the key's row for its answer,
// with a lock, after the plan's, and closed a circle with that
// transaction (seen in TestSoakPostgres: two order events, one holding
// ord:4/ship while it read ord:4 for its answer).
func TestEventTombstoneRecordedSincePlanNotWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := ledgerFoundInCircles(t)
	a := opledger.Intent{Key: "tw-a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"x":1}`)}
	c, err := l.Claim(ctx, a.Key, opledger.ClaimOptions{Intent: &a})
	require.NoError(t, err)
	_, err = l.Report(ctx, a.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A-1"})
	require.NoError(t, err)
	compactor, err := opledger.Open(ctx, dsn, opledger.Options{Worker: "w", Retention: time.Nanosecond})
	require.NoError(t, err)
	defer compactor.Close()
	res, err := compactor.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "tw-b", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "tw-b"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "tw-a"
        action: crm.create
        destination: crm
        payload: {x: 1}
`))
	require.NoError(t, err)

	waitsAfterPlan(t, l, dsn, rules, func(tx pgx.Tx) {
		// The tombstone forgotten and the key recorded again since the
		// event's plan, and held.
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `DELETE FROM tombstones WHERE key = 'tw-a'`)
		require.NoError(t, err)
		_, _, err = l.Record(ctx, a)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'tw-a' FOR UPDATE`)
		require.NoError(t, err)
	}, []string{`SELECT 1 FROM operations WHERE key = 'tw-b' FOR UPDATE`}, []string{"tw-b", "tw-a"})
	op, err := l.Get(ctx, "tw-a")
	require.NoError(t, err)
	require.False(t, op.Tombstoned, "the event, planned again, found the operation recorded again")
}

// ledgerFoundInCircles opens a ledger on a fresh PostgreSQL schema whose
// sessions look for deadlocks only after 10 minutes (deadlock_timeout, a
// run-time parameter a superuser may set), and returns it with the
// schema's DSN: where one of its calls waits in a circle, the test's own
// connection finds the circle and fails, however long the call takes to
// reach its wait.
func ledgerFoundInCircles(t *testing.T) (*opledger.Ledger, string) {
	t.Helper()
	dsn := testdb.PostgresDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("deadlock_timeout", "600s")
	u.RawQuery = q.Encode()
	l, err := opledger.Open(context.Background(), u.String(), opledger.Options{Worker: "w"})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, dsn
}

// TestEventStepShapedKeysLockedInOrder: on PostgreSQL, an event whose
// rule writes two keys shaped like steps of no stored workflow, sk/b
// recorded and sk/a new, takes sk/a's key lock before it holds sk/b's
// row, as a put of a new workflow sk with steps a and b takes sk/a's and
// sk/b's key locks before it reads their rows. Taken at the write, the
// key lock closed a circle with such a put. The event waits after its
// plan (a connection holds its deliveries table); a second connection
// then takes the put's locks in the put's order.
func TestEventStepShapedKeysLockedInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, dsn := ledgerFoundInCircles(t)
	_, _, err := l.Record(ctx, opledger.Intent{Key: "sk/b", Action: "crm.update", Destination: "crm", Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: r
    source: shop
    type: t
    operations:
      - key: "sk/b"
        action: crm.update
        destination: crm
        payload: {v: 1}
      - key: "sk/a"
        action: crm.create
        destination: crm
        payload: {x: 1}
`))
	require.NoError(t, err)

	// The locks of a put of a new workflow sk with steps a and b.
	waitsAfterPlan(t, l, dsn, rules, nil, []string{lockOperationKeySQL("sk/a"), lockOperationKeySQL("sk/b"),
		`SELECT 1 FROM operations WHERE key = 'sk/b' FOR UPDATE`}, []string{"sk/b", "sk/a"})
}

// waitsAfterPlan has the event of rules wait after its plan, its
// deliveries table held by a connection. Meanwhile a second connection
// runs before (if not nil) in its transaction, then starts stmts in the
// background and waits until they wait for a lock. Once the event goes
// on, stmts must end without an error (with the ledger of
// ledgerFoundInCircles, a circle fails them, not the event), and the
// event must apply, with the operation keys want.
func waitsAfterPlan(t *testing.T, l *opledger.Ledger, dsn string, rules *opledger.Rules, before func(pgx.Tx), stmts, want []string) {
	t.Helper()
	ctx := context.Background()
	deliveries, wait := eventBlockedBy(t, l, dsn, rules, `LOCK TABLE deliveries IN SHARE MODE`, "the event, at its delivery,")
	other, tx := holdingTx(t, dsn)
	defer tx.Rollback(ctx)
	if before != nil {
		before(tx)
	}
	done := make(chan error, 1)
	go func() {
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				done <- fmt.Errorf("%s: %w", q, err)
				return
			}
		}
		done <- nil
	}()
	testdb.WaitBlocked(t, other.PgConn().PID(), "the second connection")

	require.NoError(t, deliveries.Commit(ctx)) // the event goes on to its writes
	require.NoError(t, <-done, "the second connection waited for the event, not the event for it: no deadlock")
	require.NoError(t, tx.Commit(ctx))
	res, err := wait()
	require.NoError(t, err)
	require.Equal(t, opledger.EventApplied, res.Status, res.Event.Reason)
	require.Equal(t, want, res.Event.OperationKeys)
}
