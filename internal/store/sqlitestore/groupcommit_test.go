package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

func openTestStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "ledger.db"), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	return s
}

// waitQueued waits, polling with a deadline, until n write requests wait
// in the group-commit queue. The caller holds the writer (s.wlock); if the
// deadline passes, waitQueued gives it back, so that the callers queued so
// far are not left blocked, and fails t.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	const timeout = 30 * time.Second
	deadline := time.Now().Add(timeout)
	for {
		s.group.mu.Lock()
		l := len(s.group.queue)
		s.group.mu.Unlock()
		if l >= n {
			return
		}
		if time.Now().After(deadline) {
			<-s.wlock
			t.Fatalf("only %d of %d write requests queued behind the held writer within %s", l, n, timeout)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // paces the poll
	}
}

func insertToken(ctx context.Context, tx store.Tx, id, hash string) error {
	return tx.InsertToken(ctx, &store.Token{ID: id, Tenant: "t", Name: id, Hash: hash, Access: "read-write", CreatedAt: time.Now()})
}

func tokenIDs(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	var toks []*store.Token
	require.NoError(t, s.View(context.Background(), func(ctx context.Context, r store.Reader) error {
		var err error
		toks, err = r.ListTokens(ctx, "t")
		return err
	}))
	out := map[string]bool{}
	for _, tok := range toks {
		out[tok.ID] = true
	}
	return out
}

// TestGroupCommitIsolatesCallers queues many write functions behind the
// writer so that they share one transaction, and checks that each caller
// gets exactly its own outcome: failures, conflicts and a panic roll back
// their own writes only, later functions see earlier ones' writes, and the
// committed data is exactly what was acknowledged.
func TestGroupCommitIsolatesCallers(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	ctx := context.Background()
	before := s.group.commits.Load()

	const n = 64
	s.wlock <- struct{}{} // hold the writer: every caller queues
	errs := make([]error, n)
	panics := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { panics[i] = recover() }()
			id := fmt.Sprintf("tok-%02d", i)
			errs[i] = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				switch i % 5 {
				case 0: // writes, then fails
					if err := insertToken(ctx, tx, id, "h-"+id); err != nil {
						return err
					}
					return fmt.Errorf("boom %d", i)
				case 1: // all race for one unique hash: the first wins
					return insertToken(ctx, tx, id, "shared")
				case 2: // reads its own write back
					if err := insertToken(ctx, tx, id, "h-"+id); err != nil {
						return err
					}
					tok, err := tx.TokenByHash(ctx, "h-"+id)
					if err != nil {
						return err
					}
					if tok.ID != id {
						return fmt.Errorf("read back %s, want %s", tok.ID, id)
					}
					return nil
				case 3:
					if i == 3 {
						if err := insertToken(ctx, tx, id, "h-"+id); err != nil {
							return err
						}
						panic("panic in write function")
					}
					return insertToken(ctx, tx, id, "h-"+id)
				default:
					return insertToken(ctx, tx, id, "h-"+id)
				}
			})
		}()
	}
	waitQueued(t, s, n)
	<-s.wlock
	wg.Wait()

	require.Equal(t, before+1, s.group.commits.Load(), "all queued callers share one transaction")
	got := tokenIDs(t, s)
	sharedWinner := ""
	for i := range n {
		id := fmt.Sprintf("tok-%02d", i)
		switch {
		case i == 3:
			require.Contains(t, fmt.Sprint(panics[i]), "panic in write function")
			require.False(t, got[id], "a panicking function's write must be rolled back")
			continue
		case i%5 == 0:
			require.EqualError(t, errs[i], fmt.Sprintf("boom %d", i))
			require.False(t, got[id], "a failed function's write must be rolled back")
			continue
		case i%5 == 1 && errs[i] != nil:
			require.ErrorIs(t, errs[i], store.ErrConflict)
			require.False(t, got[id])
			continue
		case i%5 == 1:
			require.Empty(t, sharedWinner, "two callers won the same unique hash")
			sharedWinner = id
		}
		require.NoError(t, errs[i], id)
		require.Nil(t, panics[i])
		require.True(t, got[id], "acknowledged write %s is missing", id)
	}
	require.NotEmpty(t, sharedWinner)
}

// TestGroupCommitWithdrawsCancelledCaller: a caller whose context ends
// while it still waits in the queue leaves it without writing.
func TestGroupCommitWithdrawsCancelledCaller(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	s.wlock <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			return insertToken(ctx, tx, "cancelled", "h-cancelled")
		})
	}()
	waitQueued(t, s, 1)
	cancel()
	err := <-done
	<-s.wlock
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
		return insertToken(ctx, tx, "after", "h-after")
	}))
	require.Equal(t, map[string]bool{"after": true}, tokenIDs(t, s))
}

// TestGroupCommitConcurrentAcknowledgements runs many concurrent callers
// with a mix of successes and failures; every acknowledged write, and no
// other, is in the database afterwards.
func TestGroupCommitConcurrentAcknowledgements(t *testing.T) {
	t.Parallel()
	s := openTestStore(t)
	const workers, each = 16, 40
	errFail := errors.New("refused")
	acked := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				id := fmt.Sprintf("w%02d-%03d", w, j)
				fail := (w+j)%3 == 0
				err := s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
					if err := insertToken(ctx, tx, id, "h-"+id); err != nil {
						return err
					}
					if fail {
						return errFail
					}
					return nil
				})
				if fail {
					if !errors.Is(err, errFail) {
						t.Errorf("%s: got %v, want its own error", id, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", id, err)
					continue
				}
				acked[w] = append(acked[w], id)
			}
		}()
	}
	wg.Wait()
	want := map[string]bool{}
	for _, ids := range acked {
		for _, id := range ids {
			want[id] = true
		}
	}
	require.Equal(t, want, tokenIDs(t, s))
	t.Logf("%d callers, %d transactions", workers*each, s.group.commits.Load())
}

// TestTemporaryStorage: the writer keeps its savepoint journals in memory,
// while the readers spill large sorts to temporary files, so that a query
// over the whole ledger (Stats) does not hold it all in memory.
func TestTemporaryStorage(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	var writer, reader int
	require.NoError(t, s.wconn.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&writer))
	require.NoError(t, s.reader.QueryRowContext(ctx, `PRAGMA temp_store`).Scan(&reader))
	require.Equal(t, 2, writer, "writer: MEMORY")
	require.NotEqual(t, 2, reader, "readers: not MEMORY")
}

// TestGroupCommitLeaderGoneWhileLocked: the caller leading a group commit
// stops waiting for the file's write lock once its context ends, whether
// it waits in the file's queue (another process's writeLock) or for
// SQLite's lock (a connection of its own in BEGIN IMMEDIATE, as a sqlite3
// shell would hold it). It gets its context's error while the lock is
// still held; the callers batched with it are not lost: one whose context
// ended too gets its error, the others are written by the next leader
// once the lock is free, and nothing of the two cancelled writes is.
func TestGroupCommitLeaderGoneWhileLocked(t *testing.T) {
	skipWithoutFlock(t)
	for _, held := range []string{"SQLite's lock", "the file's queue"} {
		t.Run(held, func(t *testing.T) {
			// The busy timeout outlasts the test: a write that waited
			// for it would fail with store.ErrBusy, not be served.
			s, path := openBusyStore(t, time.Minute)
			var release func()
			if held == "SQLite's lock" {
				release = holdSQLiteLock(t, path)
			} else {
				other := newWriteLock(path)
				t.Cleanup(func() { other.close() })
				mustLock(t, other)
				release = other.unlock
			}

			const n = 4
			s.wlock <- struct{}{} // hold the writer: the followers queue
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					errs[i] = s.Update(context.Background(), func(ctx context.Context, tx store.Tx) error {
						return insertToken(ctx, tx, fmt.Sprintf("f%d", i), fmt.Sprintf("h-f%d", i))
					})
				})
			}
			gone, goneCancel := context.WithCancel(context.Background())
			goneErr := make(chan error, 1)
			go func() {
				goneErr <- s.Update(gone, func(ctx context.Context, tx store.Tx) error { return insertToken(ctx, tx, "gone", "h-gone") })
			}()
			waitQueued(t, s, n+1)

			// The leader: what submit does once it has the writer, which
			// the test hands it.
			lctx, lcancel := context.WithCancel(context.Background())
			r := &writeReq{ctx: lctx, done: make(chan writeResult, 1), fn: func(ctx context.Context, tx store.Tx) error {
				return insertToken(ctx, tx, "leader", "h-leader")
			}}
			s.group.enqueue(r)
			leaderErr := make(chan error, 1)
			go func() { leaderErr <- s.settled(s.lead(r)) }()
			if held == "SQLite's lock" {
				waitHeldOn(t, path+WriteLockSuffix) // past the file's queue, in BEGIN
			} else {
				waitBlockedOn(t, path+WriteLockSuffix, 1)
			}
			goneCancel()
			lcancel()

			// Both return while the lock is still held.
			require.ErrorIs(t, <-leaderErr, context.Canceled)
			require.ErrorIs(t, <-goneErr, context.Canceled)
			release()
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "follower %d", i)
			}
			require.Equal(t, map[string]bool{"f0": true, "f1": true, "f2": true, "f3": true}, tokenIDs(t, s))
		})
	}
}
