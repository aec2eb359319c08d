package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

var setColumns = regexp.MustCompile(`(\w+) = \?`)

// setList returns the columns an UPDATE statement sets.
func setList(query string) []string {
	set := query[len("UPDATE operations SET "):regexp.MustCompile(` WHERE `).FindStringIndex(query)[0]]
	var cols []string
	for _, m := range setColumns.FindAllStringSubmatch(set, -1) {
		cols = append(cols, m[1])
	}
	return cols
}

// TestUpdateOperationSetsChangedColumns changes one field at a time and
// checks that the UPDATE sets exactly its column, for every column but the
// key: a column added to opColumns without a case in storedOp.same (or
// here) fails.
func TestUpdateOperationSetsChangedColumns(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 3, 0, 0, 123456000, time.UTC)
	base := store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d", Version: 1, Fingerprint: "f",
		Payload: []byte(`{"x":1}`), SensitiveFields: []string{"x"}, Owner: "o", SourceEvent: "e", ApprovedBy: "b",
		State: "in_progress", FailureKind: "", FirstDispatchedAt: at, AttemptCount: 1, FencingToken: 1,
		CurrentAttemptID: "a1", LeaseExpiresAt: at, NotBefore: at, ReviewBy: at, UnresolvedSince: at,
		ProtectedUntil: at, DestinationRef: "r", Response: []byte(`{}`), LastError: "x", DuplicateEffects: 0,
		Revision: 3, CreatedAt: at, UpdatedAt: at}
	later := at.Add(time.Microsecond)
	change := map[string]func(o *store.Operation){
		"action":              func(o *store.Operation) { o.Action = "a2" },
		"destination":         func(o *store.Operation) { o.Destination = "d2" },
		"version":             func(o *store.Operation) { o.Version++ },
		"fingerprint":         func(o *store.Operation) { o.Fingerprint = "f2" },
		"payload":             func(o *store.Operation) { o.Payload = []byte(`{"x":2}`) },
		"sensitive_fields":    func(o *store.Operation) { o.SensitiveFields = []string{"x", "y"} },
		"owner":               func(o *store.Operation) { o.Owner = "o2" },
		"source_event":        func(o *store.Operation) { o.SourceEvent = "e2" },
		"requires_approval":   func(o *store.Operation) { o.RequiresApproval = true },
		"approved_by":         func(o *store.Operation) { o.ApprovedBy = "b2" },
		"state":               func(o *store.Operation) { o.State = "succeeded" },
		"failure_kind":        func(o *store.Operation) { o.FailureKind = "permanent" },
		"dispatched":          func(o *store.Operation) { o.Dispatched = true },
		"first_dispatched_at": func(o *store.Operation) { o.FirstDispatchedAt = later },
		"attempt_count":       func(o *store.Operation) { o.AttemptCount++ },
		"fencing_token":       func(o *store.Operation) { o.FencingToken++ },
		"current_attempt_id":  func(o *store.Operation) { o.CurrentAttemptID = "a2" },
		"lease_expires_at":    func(o *store.Operation) { o.LeaseExpiresAt = time.Time{} },
		"not_before":          func(o *store.Operation) { o.NotBefore = later },
		"review_by":           func(o *store.Operation) { o.ReviewBy = later },
		"unresolved_since":    func(o *store.Operation) { o.UnresolvedSince = later },
		"protected":           func(o *store.Operation) { o.Protected = true },
		"destination_ref":     func(o *store.Operation) { o.DestinationRef = "r2" },
		"response":            func(o *store.Operation) { o.Response = nil }, // NULL is not an empty object
		"last_error":          func(o *store.Operation) { o.LastError = "" },
		"duplicate_effects":   func(o *store.Operation) { o.DuplicateEffects++ },
		"revision":            func(o *store.Operation) { o.Revision++ },
		"created_at":          func(o *store.Operation) { o.CreatedAt = later },
		"updated_at":          func(o *store.Operation) { o.UpdatedAt = later },
		"protected_until":     func(o *store.Operation) { o.ProtectedUntil = later },
		"state_since":         func(o *store.Operation) { o.StateSince = later },
		"earlier_payloads":    func(o *store.Operation) { o.EarlierPayloads = []byte(`[{"to":"a@example.com"}]`) },
	}
	require.Len(t, change, len(opColumnNames)-2, "a case per column but tenant and key")
	tx := &sqlTx{}
	baseArgs, err := opArgs(&base)
	require.NoError(t, err)
	for _, col := range opColumnNames[2:] {
		fn, ok := change[col]
		require.True(t, ok, "no change for column %s", col)
		tx.keep(&base, baseArgs, rowRef{})
		op := base
		fn(&op)
		args, err := opArgs(&op)
		require.NoError(t, err)
		query, qargs := updateOperationSQL(tx.find("t", "k", 3), &op, args, 3)
		require.Equal(t, []string{col}, setList(query), col)
		require.Len(t, qargs, 4, col)
	}

	// Equal values in new slices and times are not changes.
	op := base
	op.Payload = slices.Clone(base.Payload)
	op.SensitiveFields = []string{"x"}
	op.LeaseExpiresAt = at.In(time.FixedZone("x", 3600))
	args, err := opArgs(&op)
	require.NoError(t, err)
	query, _ := updateOperationSQL(tx.find("t", "k", 3), &op, args, 3)
	require.Empty(t, setList(query), query)
	require.Contains(t, query, "SET revision = revision WHERE")

	// No kept row at the expected revision: every column.
	query, qargs := updateOperationSQL(tx.find("t", "k", 2), &op, args, 2)
	require.Equal(t, opColumnNames[2:], setList(query))
	require.Len(t, qargs, len(opColumnNames)-2+3)
}

// TestUpdateOperationPartialWrites runs updates that set some columns
// through the store: after each, the row read back is the operation
// written; changing the key's row behind the kept copy (another revision)
// is a conflict; a deleted and re-inserted key starts afresh.
func TestUpdateOperationPartialWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	op := &store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d", Version: 1, Fingerprint: "f",
		Payload: []byte(`{}`), State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now, NotBefore: now}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error { return tx.InsertOperation(ctx, op) }))

	var want *store.Operation
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		got, err := tx.GetOperation(ctx, "t", "k")
		if err != nil {
			return err
		}
		// Two transitions in one transaction: the second compares with
		// what the first wrote.
		got.State, got.NotBefore, got.LeaseExpiresAt, got.AttemptCount = "in_progress", time.Time{}, now.Add(time.Hour), 1
		got.Revision = 2
		if err := tx.UpdateOperation(ctx, got, 1); err != nil {
			return err
		}
		got.Dispatched, got.FirstDispatchedAt, got.Revision = true, now, 3
		got.SensitiveFields = []string{"secret"}
		if err := tx.UpdateOperation(ctx, got, 2); err != nil {
			return err
		}
		// A stale revision is still a conflict.
		got.Revision = 4
		if err := tx.UpdateOperation(ctx, got, 2); !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("update at a stale revision: %v, want a conflict", err)
		}
		got.Revision = 3
		want = got
		return nil
	}))
	var read *store.Operation
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		read, err = r.GetOperation(ctx, "t", "k")
		return err
	}))
	require.Equal(t, want, read)

	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		got, err := tx.GetOperation(ctx, "t", "k")
		if err != nil {
			return err
		}
		if err := tx.(*sqlTx).deleteOperation(ctx, "t", "k", got.Revision); err != nil {
			return err
		}
		fresh := *op
		fresh.State, fresh.Owner = "held", "team"
		if err := tx.InsertOperation(ctx, &fresh); err != nil {
			return err
		}
		fresh.State, fresh.Revision = "pending", 2
		if err := tx.UpdateOperation(ctx, &fresh, 1); err != nil {
			return err
		}
		want = &fresh
		return nil
	}))
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		read, err = r.GetOperation(ctx, "t", "k")
		return err
	}))
	require.Equal(t, want.State, read.State)
	require.Equal(t, "team", read.Owner)
	require.Equal(t, int64(2), read.Revision)
}

// TestOperationRefNamesWrittenRows: a transaction names the row id of an
// operation it inserted or updated, keeps it across a later read of the
// same operation, looks up the others, and forgets a deleted one's.
func TestOperationRefNamesWrittenRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	newOp := func(key string) *store.Operation {
		return &store.Operation{Tenant: "t", Key: key, Action: "a", Destination: "d", Version: 1, Fingerprint: "f",
			Payload: []byte("{}"), State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now}
	}
	lookup := "(" + operationID + ")"
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertOperation(ctx, newOp("old"))
	}))
	require.NoError(t, s.Update(ctx, func(ctx context.Context, st store.Tx) error {
		tx := st.(*sqlTx)
		ref, args := tx.operationRef("t", "old")
		require.Equal(t, lookup, ref, "not written by this transaction")
		require.Equal(t, []any{"t", "old"}, args)

		require.NoError(t, tx.InsertOperation(ctx, newOp("new")))
		ref, args = tx.operationRef("t", "new")
		require.Equal(t, "?", ref)
		require.Equal(t, []any{int64(2)}, args)
		_, err := tx.GetOperation(ctx, "t", "new")
		require.NoError(t, err)
		ref, _ = tx.operationRef("t", "new")
		require.Equal(t, "?", ref, "a read keeps the id")

		old, err := tx.GetOperation(ctx, "t", "old")
		require.NoError(t, err)
		old.Revision, old.State = 2, "in_progress"
		require.NoError(t, tx.UpdateOperation(ctx, old, 1))
		ref, args = tx.operationRef("t", "old")
		require.Equal(t, "?", ref)
		require.Equal(t, []any{int64(1)}, args)

		require.NoError(t, tx.deleteOperation(ctx, "t", "new", 1))
		ref, _ = tx.operationRef("t", "new")
		require.Equal(t, lookup, ref, "a deleted operation's id is forgotten")
		return nil
	}))
}
