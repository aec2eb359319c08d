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

// opSensitiveArg is the position of sensitive_fields in opColumnNames.
const opSensitiveArg = 7

// storedOp is an operation row as a transaction last read or wrote it.
type storedOp struct {
	op store.Operation
	// sensitive is the sensitive_fields column as stored (JSON text);
	// op.SensitiveFields is not kept.
	sensitive string
}

// keep records op as the row now stored, sensitive being its
// sensitive_fields column. The byte slices are copied: the caller goes on
// changing op.
func (t *sqlTx) keep(op *store.Operation, sensitive string) {
	c := &storedOp{op: *op, sensitive: sensitive}
	c.op.SensitiveFields = nil
	c.op.Payload = bytes.Clone(op.Payload)
	c.op.Response = bytes.Clone(op.Response)
	for i, s := range t.stored {
		if s.op.Tenant == op.Tenant && s.op.Key == op.Key {
			t.stored[i] = c
			return
		}
	}
	t.stored = append(t.stored, c)
}

// find returns the kept row of an operation if it is at revision rev.
func (t *sqlTx) find(tenant, key string, rev int64) *storedOp {
	for _, s := range t.stored {
		if s.op.Tenant == tenant && s.op.Key == key {
			if s.op.Revision == rev {
				return s
			}
			return nil
		}
	}
	return nil
}

// forget drops the kept row of a deleted operation.
func (t *sqlTx) forget(tenant, key string) {
	t.stored = slices.DeleteFunc(t.stored, func(s *storedOp) bool { return s.op.Tenant == tenant && s.op.Key == key })
}

// updateOperationSQL returns the UPDATE of op, checked against revision
// prevRevision, and its arguments (args are opArgs(op)). It sets the
// columns whose values differ from prev, or every column but the key when
// prev is nil. sensitive is op's sensitive_fields as it is stored.
func updateOperationSQL(prev *storedOp, op *store.Operation, sensitive string, args []any, prevRevision int64) (string, []any) {
	var b strings.Builder
	b.WriteString("UPDATE operations SET ")
	out := make([]any, 0, len(args)+1)
	for i := 2; i < len(opColumnNames); i++ { // tenant and key never change
		if prev != nil && prev.same(i, op, sensitive) {
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

// same reports whether column i (of opColumnNames) stores the same value
// for op as for the kept row; sensitive is op's sensitive_fields as it
// would be stored. Times compare as the microseconds they are stored as.
// A column this function does not know is never the same.
func (p *storedOp) same(i int, op *store.Operation, sensitive string) bool {
	o := &p.op
	switch opColumnNames[i] {
	case "action":
		return o.Action == op.Action
	case "destination":
		return o.Destination == op.Destination
	case "version":
		return o.Version == op.Version
	case "fingerprint":
		return o.Fingerprint == op.Fingerprint
	case "payload":
		return bytes.Equal(storedPayload(o.Payload), storedPayload(op.Payload))
	case "sensitive_fields":
		return p.sensitive == sensitive
	case "owner":
		return o.Owner == op.Owner
	case "source_event":
		return o.SourceEvent == op.SourceEvent
	case "requires_approval":
		return o.RequiresApproval == op.RequiresApproval
	case "approved_by":
		return o.ApprovedBy == op.ApprovedBy
	case "state":
		return o.State == op.State
	case "failure_kind":
		return o.FailureKind == op.FailureKind
	case "dispatched":
		return o.Dispatched == op.Dispatched
	case "first_dispatched_at":
		return toMicros(o.FirstDispatchedAt) == toMicros(op.FirstDispatchedAt)
	case "attempt_count":
		return o.AttemptCount == op.AttemptCount
	case "fencing_token":
		return o.FencingToken == op.FencingToken
	case "current_attempt_id":
		return o.CurrentAttemptID == op.CurrentAttemptID
	case "lease_expires_at":
		return toMicros(o.LeaseExpiresAt) == toMicros(op.LeaseExpiresAt)
	case "not_before":
		return toMicros(o.NotBefore) == toMicros(op.NotBefore)
	case "review_by":
		return toMicros(o.ReviewBy) == toMicros(op.ReviewBy)
	case "unresolved_since":
		return toMicros(o.UnresolvedSince) == toMicros(op.UnresolvedSince)
	case "protected":
		return o.Protected == op.Protected
	case "destination_ref":
		return o.DestinationRef == op.DestinationRef
	case "response":
		// NULL and an empty BLOB differ.
		return (o.Response == nil) == (op.Response == nil) && bytes.Equal(o.Response, op.Response)
	case "last_error":
		return o.LastError == op.LastError
	case "duplicate_effects":
		return o.DuplicateEffects == op.DuplicateEffects
	case "revision":
		return o.Revision == op.Revision
	case "created_at":
		return toMicros(o.CreatedAt) == toMicros(op.CreatedAt)
	case "updated_at":
		return toMicros(o.UpdatedAt) == toMicros(op.UpdatedAt)
	case "protected_until":
		return toMicros(o.ProtectedUntil) == toMicros(op.ProtectedUntil)
	}
	return false
}

// storedPayload is the payload as opArgs stores it.
func storedPayload(p []byte) []byte {
	if p == nil {
		return []byte("null")
	}
	return p
}
