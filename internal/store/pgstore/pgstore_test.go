package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testdb"
)

// newSchemaDSN is testdb.PostgresDSN for the storetest harness.
func newSchemaDSN(t *testing.T) string { return testdb.PostgresDSN(t) }

func TestConformance(t *testing.T) {
	t.Parallel()
	testdb.RequirePostgres(t)
	storetest.Run(t, storetest.Harness{NewDSN: newSchemaDSN,
		LegacyRecovery: func(t *testing.T, dsn, tenant, key string, at time.Time, waited time.Duration) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `INSERT INTO recoveries (tenant, key, decision, at, waited) VALUES ($1, $2, 'mark_succeeded', $3, $4)`,
				tenant, key, at, waited.Microseconds())
			require.NoError(t, err)
		},
		RecoveryKeys: func(t *testing.T, dsn string) int {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var n int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM recoveries WHERE key <> ''`).Scan(&n))
			return n
		}})
}

func TestMigrationVersionsMatchSQLite(t *testing.T) {
	t.Parallel()
	pg, err := pgstore.MigrationVersions()
	require.NoError(t, err)
	lite, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	require.NotEmpty(t, pg)
	require.Equal(t, lite, pg, "pgstore and sqlitestore must carry the same migration versions")
}

// openStore opens and migrates a store on a fresh schema.
func openStore(t *testing.T) (*pgstore.Store, string) {
	t.Helper()
	dsn := newSchemaDSN(t)
	ctx := context.Background()
	s, err := pgstore.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx, nil))
	return s, dsn
}

func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	dsn := newSchemaDSN(t)
	ctx := context.Background()
	const n = 6
	stores := make([]*pgstore.Store, n)
	for i := range stores {
		s, err := pgstore.Open(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(ctx, nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "migrator %d", i)
	}
	require.NoError(t, stores[0].Migrate(ctx, nil), "migrating again is a no-op")

	versions, err := pgstore.MigrationVersions()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	require.NoError(t, err)
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, versions, applied, "each version applied exactly once")
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()

	var now time.Time
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		now, err = r.Now(ctx)
		return err
	}))
	require.Equal(t, time.UTC, now.Location())
	require.Equal(t, now, now.Truncate(time.Microsecond))
	require.WithinDuration(t, time.Now(), now, time.Minute, "the database's clock")

	t0 := now.Add(-time.Hour)
	full := &store.Operation{
		Tenant: "t1", Key: "full", Action: "crm.create", Destination: "crm", Version: 3,
		Fingerprint: "sha256:abc", Payload: []byte(`{"a":1}`), SensitiveFields: []string{"a", "b.c"},
		Owner: "ops", SourceEvent: "ev1", RequiresApproval: true, ApprovedBy: "boss",
		State: "in_progress", FailureKind: "", Dispatched: true, FirstDispatchedAt: t0.Add(time.Second),
		AttemptCount: 2, FencingToken: 7, CurrentAttemptID: "A1", LeaseExpiresAt: t0.Add(2 * time.Second),
		NotBefore: t0.Add(3 * time.Second), ReviewBy: t0.Add(4 * time.Second), UnresolvedSince: t0.Add(5 * time.Second),
		Protected: true, DestinationRef: "REF", Response: []byte(`{"id":9}`), LastError: "boom",
		DuplicateEffects: 1, Revision: 1, CreatedAt: t0, UpdatedAt: t0.Add(6 * time.Second),
	}
	bare := &store.Operation{
		Tenant: "t1", Key: "bare", Action: "crm.create", Destination: "email", Version: 1,
		Fingerprint: "sha256:def", State: "pending", Revision: 1, CreatedAt: t0, UpdatedAt: t0,
	}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		n1, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond)
		n2, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		require.Equal(t, n1, n2, "fixed within a transaction")
		if err := tx.InsertOperation(ctx, full); err != nil {
			return err
		}
		return tx.InsertOperation(ctx, bare)
	}))

	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertOperation(ctx, bare)
	})
	require.ErrorIs(t, err, store.ErrConflict, "duplicate key")

	var got, gotBare *store.Operation
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		if got, err = r.GetOperation(ctx, "t1", "full"); err != nil {
			return err
		}
		gotBare, err = r.GetOperation(ctx, "t1", "bare")
		return err
	}))
	require.Equal(t, full, got)
	require.Equal(t, []byte("null"), gotBare.Payload)
	require.Equal(t, []string{}, gotBare.SensitiveFields)
	require.Nil(t, gotBare.Response)
	require.True(t, gotBare.NotBefore.IsZero())
	require.True(t, gotBare.LeaseExpiresAt.IsZero())

	// Compare-and-set on the revision.
	bare.Payload, bare.SensitiveFields = []byte("null"), []string{}
	bare.Revision = 2
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateOperation(ctx, bare, 5)
	})
	require.ErrorIs(t, err, store.ErrConflict, "stale revision")
	bare.Owner = "alice"
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.UpdateOperation(ctx, bare, 1)
	}))

	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t1", "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = r.GetOperation(ctx, "t2", "full")
		require.ErrorIs(t, err, store.ErrNotFound, "tenants do not see each other")

		due, err := r.DueOperations(ctx, store.DueParams{Tenant: "t1", Now: now, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []store.OperationID{{Tenant: "t1", Key: "bare"}}, due, "an unset not_before is due")
		due, err = r.DueOperations(ctx, store.DueParams{Tenant: "t1", Destinations: []string{"crm"}, Now: now, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, due)

		expired, err := r.ExpiredLeases(ctx, now, store.OperationID{}, 10)
		require.NoError(t, err)
		require.Equal(t, []store.OperationID{{Tenant: "t1", Key: "full"}}, expired)

		counts, err := r.CountByState(ctx, "t1")
		require.NoError(t, err)
		require.Equal(t, map[string]int{"pending": 1, "in_progress": 1}, counts)

		ops, err := r.ListOperations(ctx, store.ListParams{Tenant: "t1", States: []string{"pending"}, Owner: "alice", Limit: 10})
		require.NoError(t, err)
		require.Len(t, ops, 1)
		require.Equal(t, "bare", ops[0].Key)
		require.EqualValues(t, 2, ops[0].Revision)
		return nil
	}))

	// Attempts, timeline, tombstones.
	a := &store.Attempt{ID: "A1", Tenant: "t1", Key: "full", Number: 1, FencingToken: 7, Worker: "w",
		ClaimedAt: t0, LeaseExpiresAt: t0.Add(time.Minute)}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertAttempt(ctx, a); err != nil {
			return err
		}
		a.FinishedAt, a.Outcome, a.Response, a.Stale = t0.Add(time.Second), "succeeded", []byte(`{}`), true
		if err := tx.UpdateAttempt(ctx, a); err != nil {
			return err
		}
		e1 := &store.TimelineEntry{Tenant: "t1", Key: "full", At: t0, Actor: "w", Event: "claimed"}
		e2 := &store.TimelineEntry{Tenant: "t1", Key: "full", At: t0, Actor: "w", Event: "dispatched"}
		if err := tx.AppendTimeline(ctx, e1); err != nil {
			return err
		}
		if err := tx.AppendTimeline(ctx, e2); err != nil {
			return err
		}
		require.Greater(t, e2.ID, e1.ID)
		err := tx.UpdateAttempt(ctx, &store.Attempt{ID: "missing"})
		require.ErrorIs(t, err, store.ErrNotFound)
		return nil
	}))
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetAttempt(ctx, "t1", "full", "A1")
		require.NoError(t, err)
		require.Equal(t, a, got)
		tl, err := r.ListTimeline(ctx, "t1", "full")
		require.NoError(t, err)
		require.Len(t, tl, 2)
		require.Equal(t, "claimed", tl[0].Event)
		require.Equal(t, t0, tl[0].At)
		return nil
	}))

	tb := &store.Tombstone{Tenant: "t1", Key: "full", Fingerprint: "sha256:abc", State: "succeeded",
		DestinationRef: "REF", CreatedAt: t0, FinishedAt: t0.Add(time.Second), CompactedAt: t0.Add(2 * time.Second)}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.UpsertTombstone(ctx, tb); err != nil {
			return err
		}
		tb.CompactedAt = t0.Add(3 * time.Second)
		if err := tx.UpsertTombstone(ctx, tb); err != nil {
			return err
		}
		return nil
	}))
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.CompactOperations(ctx, []store.Compaction{{Tombstone: *tb, Revision: 99}})
	})
	require.ErrorIs(t, err, store.ErrConflict, "a moved revision is not deleted")
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.CompactOperations(ctx, []store.Compaction{{Tombstone: *tb, Revision: 1}})
	}))
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		got, err := r.GetTombstone(ctx, "t1", "full")
		require.NoError(t, err)
		require.Equal(t, tb, got)
		_, err = r.GetOperation(ctx, "t1", "full")
		require.ErrorIs(t, err, store.ErrNotFound)
		attempts, err := r.ListAttempts(ctx, "t1", "full")
		require.NoError(t, err)
		require.Empty(t, attempts)
		return nil
	}))
	var forgotten int
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		var err error
		forgotten, err = tx.DeleteTombstonesBefore(ctx, now, 1000)
		return err
	}))
	require.Equal(t, 1, forgotten)
}

// TestUpdateRollsBack checks that an error from fn discards the writes.
func TestUpdateRollsBack(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if err := tx.InsertOperation(ctx, &store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d",
			Version: 1, Fingerprint: "f", State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "k")
		require.ErrorIs(t, err, store.ErrNotFound)
		return nil
	}))
}

// TestUpdateCommitOutlivesCancel: a context that ends while the commit
// waits (here its insert waits for another session's insert of the same
// key, which then rolls back) does not make Update report a failure for
// a write that commits: the cancel would reach the server after COMMIT
// was queued.
func TestUpdateCommitOutlivesCancel(t *testing.T) {
	t.Parallel()
	s, dsn := openStore(t)
	bg := context.Background()
	other, err := pgx.Connect(bg, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { other.Close(bg) })
	_, err = other.Exec(bg, `BEGIN`)
	require.NoError(t, err)
	_, err = other.Exec(bg, `INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state, revision, created_at, updated_at)
		VALUES ('t', 'k', 'other', 'd', 1, 'f', 'null', 'pending', 1, now(), now())`)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			// Written as a transition's writes are: sent with COMMIT.
			return store.WriteAll(ctx, tx, []store.Write{
				{InsertOperation: &store.Operation{Tenant: "t", Key: "k", Action: "mine", Destination: "d",
					Version: 1, Fingerprint: "f", State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now}},
				{AppendTimeline: &store.TimelineEntry{Tenant: "t", Key: "k", At: now, Actor: "w", Event: "recorded"}},
			})
		})
	}()
	testdb.WaitBlockedBy(t, other, "the update's insert")
	cancel()
	_, err = other.Exec(bg, `ROLLBACK`)
	require.NoError(t, err)
	require.NoError(t, <-done, "its write committed")
	require.NoError(t, s.View(bg, func(ctx context.Context, r store.Reader) error {
		op, err := r.GetOperation(ctx, "t", "k")
		require.NoError(t, err)
		require.Equal(t, "mine", op.Action)
		return nil
	}))
}

// TestSchemaIsolation checks that the DSN's search_path is honoured: two
// stores on two schemas of one database see nothing of each other.
func TestSchemaIsolation(t *testing.T) {
	t.Parallel()
	s1, _ := openStore(t)
	s2, _ := openStore(t)
	ctx := context.Background()
	require.NoError(t, s1.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.InsertOperation(ctx, &store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d",
			Version: 1, Fingerprint: "f", State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now})
	}))
	require.NoError(t, s2.View(ctx, func(ctx context.Context, r store.Reader) error {
		counts, err := r.CountByState(ctx, "t")
		require.NoError(t, err)
		require.Empty(t, counts)
		return nil
	}))
	require.Equal(t, "postgres", s1.Name())
}

// TestTxReadWaitsForWriter checks that a write transaction's read of an
// operation waits for another transaction that read it for writing, and
// then sees that transaction's write: a decision such as retention's delete
// is never made on a row that is being changed.
func TestTxReadWaitsForWriter(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := context.Background()
	var op *store.Operation
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		op = &store.Operation{Tenant: "t", Key: "k", Action: "a", Destination: "d", Version: 1,
			Fingerprint: "f", State: "failed", Revision: 1, CreatedAt: now, UpdatedAt: now}
		return tx.InsertOperation(ctx, op)
	}))

	// The writer reads the row for writing and keeps it until the reader
	// is seen waiting for it (pg_blocking_pids), then changes it.
	writerPID, release, writerDone := make(chan int, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		writerDone <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			row, err := tx.GetOperation(ctx, "t", "k")
			if err != nil {
				return err
			}
			pid, err := pgstore.TxBackendPID(ctx, tx)
			if err != nil {
				return err
			}
			writerPID <- pid
			<-release
			row.State, row.Revision = "pending", 2
			return tx.UpdateOperation(ctx, row, 1)
		})
	}()
	released := false
	releaseWriter := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer releaseWriter() // a failed check must not leave the writer waiting
	var writer int
	select {
	case writer = <-writerPID:
	case err := <-writerDone:
		t.Fatalf("the writer ended before it held the row: %v", err)
	}

	// The reader's transaction reads the row first, as a decision does.
	readerDone := make(chan error, 1)
	var seen *store.Operation
	go func() {
		readerDone <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			seen, err = tx.GetOperation(ctx, "t", "k")
			return err
		})
	}()
	// The row is in this test's own schema: the only backend that can wait
	// for the writer is the reader's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		waiting, err := s.Blocking(ctx, writer)
		require.NoError(t, err)
		if waiting {
			break
		}
		require.True(t, time.Now().Before(deadline), "the reader never waited for the writer (backend %d)", writer)
		poll := time.NewTimer(5 * time.Millisecond)
		select {
		case err := <-readerDone:
			poll.Stop()
			state := "nothing"
			if seen != nil {
				state = seen.State
			}
			t.Fatalf("the read finished while the writer held the row: read %s, err %v", state, err)
		case <-poll.C:
		}
	}
	releaseWriter()
	require.NoError(t, <-writerDone)
	require.NoError(t, <-readerDone)
	require.Equal(t, "pending", seen.State, "the read waited for the writer")
	require.EqualValues(t, 2, seen.Revision)
}

// TestNewerSchemaRefused: a store a newer release has migrated is refused,
// not taken for up to date and written with a schema this one does not know.
func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	s, dsn := openStore(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES (999, '999_from_the_future.sql')`)
	require.NoError(t, err)
	err = s.Migrate(ctx, nil)
	require.ErrorContains(t, err, "schema is at version 999, newer than this opledger knows")
}
