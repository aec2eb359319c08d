package opledger

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// writeRecorder passes everything to a real store and keeps the writes of
// each conditional write it passes on.
type writeRecorder struct {
	store.Store
	mu     sync.Mutex
	writes [][]store.Write
}

func (r *writeRecorder) WriteConditional(ctx context.Context, decide func(time.Time) ([]store.Write, error)) error {
	return r.Store.(store.ConditionalWriter).WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
		ws, err := decide(now)
		if err == nil {
			r.mu.Lock()
			r.writes = append(r.writes, ws)
			r.mu.Unlock()
		}
		return ws, err
	})
}

// TestSpeculationPassesStoredRow checks that a transition decided on the
// ledger's snapshot of its claim hands the store the row as stored at the
// revision it updates (store.Write.Previous), which lets SQLite set only
// the columns that change, and that the stored row is that snapshot.
func TestSpeculationPassesStoredRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{Worker: "w", Lease: time.Minute})
	require.NoError(t, err)
	defer l.Close()
	rec := &writeRecorder{Store: l.store}
	l.store = rec

	in := Intent{Key: "order:1", Action: "create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)}
	c, err := l.Claim(ctx, in.Key, ClaimOptions{Intent: &in})
	require.NoError(t, err)
	var stored *store.Operation
	require.NoError(t, rec.View(ctx, func(ctx context.Context, r store.Reader) error {
		stored, err = r.GetOperation(ctx, l.tenant, in.Key)
		return err
	}))
	_, err = l.Report(ctx, in.Key, c.AttemptID, c.FencingToken, Report{Outcome: OutcomeSucceeded, DestinationRef: "R-1"})
	require.NoError(t, err)

	require.Len(t, rec.writes, 2, "the claim and the report, both conditional")
	ow, err := store.OperationWrite(rec.writes[1])
	require.NoError(t, err)
	require.NotNil(t, ow.UpdateOperation, "the report updates the operation")
	require.NotNil(t, ow.Previous, "the report passes the row it was decided on")
	require.Equal(t, stored.Revision, ow.PrevRevision)
	// The snapshot is the stored row (times as stored: to the microsecond).
	prev := *ow.Previous
	for _, tm := range []*time.Time{&prev.CreatedAt, &prev.UpdatedAt, &prev.LeaseExpiresAt, &prev.FirstDispatchedAt,
		&prev.NotBefore, &prev.ReviewBy, &prev.UnresolvedSince, &prev.ProtectedUntil} {
		*tm = tm.Truncate(time.Microsecond)
	}
	if len(prev.SensitiveFields) == 0 && len(stored.SensitiveFields) == 0 {
		prev.SensitiveFields = stored.SensitiveFields // nil and empty are stored alike
	}
	require.Equal(t, stored, &prev)
}
