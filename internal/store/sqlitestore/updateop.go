package sqlitestore

import (
	"bytes"
	"slices"
	"strings"

	"github.com/opledger/opledger/internal/store"
)

// opColumnNames are the columns of opColumns, in order; opArgs returns
// their values in the same order.
var opColumnNames = func() []string {
	cols := strings.Split(opColumns, ",")
	for i, c := range cols {
		cols[i] = strings.TrimSpace(c)
	}
	return cols
}()

// storedOp is an operation row as a transaction last read or wrote it: its
// values as opArgs stores them, and, once the transaction has written it,
// where its history goes (rowRef), so that its attempts and timeline
// entries need no lookup (operationRef, appendTimelineSQL).
type storedOp struct {
	tenant, key string
	revision    int64
	args        []any
	rowRef
}

// rowRef is what a write of an operation row tells about it: its row id
// (0 when not known) and the largest seq of its timeline entries.
type rowRef struct {
	id, lastSeq int64
}

// keep records the row now stored for op, args being opArgs(op), and ref
// (a zero ref when the caller does not know it: a ref kept before for the
// same operation stays). The byte slices are copied: the caller goes on
// changing op.
func (t *sqlTx) keep(op *store.Operation, args []any, ref rowRef) {
	c := &storedOp{tenant: op.Tenant, key: op.Key, revision: op.Revision, args: slices.Clone(args), rowRef: ref}
	for i, v := range c.args {
		if b, ok := v.([]byte); ok {
			c.args[i] = bytes.Clone(b)
		}
	}
	for i, s := range t.stored {
		if s.tenant == op.Tenant && s.key == op.Key {
			if c.id == 0 {
				c.rowRef = s.rowRef
			}
			t.stored[i] = c
			return
		}
	}
	t.stored = append(t.stored, c)
}

// written returns the kept row of an operation whose row id this
// transaction knows, or nil.
func (t *sqlTx) written(tenant, key string) *storedOp {
	for _, s := range t.stored {
		if s.tenant == tenant && s.key == key && s.id != 0 {
			return s
		}
	}
	return nil
}

// find returns the kept row of an operation if it is at revision rev.
func (t *sqlTx) find(tenant, key string, rev int64) *storedOp {
	for _, s := range t.stored {
		if s.tenant == tenant && s.key == key {
			if s.revision == rev {
				return s
			}
			return nil
		}
	}
	return nil
}

// forget drops the kept row of a deleted operation, with its rowRef.
func (t *sqlTx) forget(tenant, key string) {
	t.stored = slices.DeleteFunc(t.stored, func(s *storedOp) bool { return s.tenant == tenant && s.key == key })
}

// updateOperationSQL returns the UPDATE of op, checked against revision
// prevRevision, and its arguments (args are opArgs(op)). It sets the
// columns whose stored values differ from prev's, or every column but the
// key when prev is nil.
func updateOperationSQL(prev *storedOp, op *store.Operation, args []any, prevRevision int64) (string, []any) {
	var b strings.Builder
	b.WriteString("UPDATE operations SET ")
	out := make([]any, 0, len(args)+1)
	for i := 2; i < len(opColumnNames); i++ { // tenant and key never change
		if prev != nil && sameStored(prev.args[i], args[i]) {
			continue
		}
		if len(out) > 0 {
			b.WriteString(", ")
		}
		b.WriteString(opColumnNames[i])
		b.WriteString(" = ?")
		out = append(out, args[i])
	}
	if len(out) == 0 {
		// Nothing changed, not even the revision: still check it.
		b.WriteString("revision = revision")
	}
	b.WriteString(" WHERE tenant = ? AND key = ? AND revision = ?")
	return b.String(), append(out, op.Tenant, op.Key, prevRevision)
}

// sameStored reports whether two values of opArgs store the same: times
// are already the microseconds they are stored as, and a nil BLOB (NULL)
// differs from an empty one.
func sameStored(a, b any) bool {
	if x, ok := a.([]byte); ok {
		y, ok := b.([]byte)
		return ok && (x == nil) == (y == nil) && bytes.Equal(x, y)
	}
	return a == b
}
