package opledger

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestAuthenticateDoesNotWaitForWriteLock: while another process holds
// a SQLite ledger's write lock, Authenticate answers at once (reading a
// token needs no lock); the token's use is written once the lock is
// free, and a write that gave up is not tried again at every re-check of
// the token, only after tokenUseRetry.
func TestAuthenticateDoesNotWaitForWriteLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	// A busy timeout the test would notice: waiting it out fails the
	// check that the use is written only once the lock is free.
	l, _ := openOffsetLedger(t, dsn, Options{SQLiteBusyTimeout: 10 * time.Minute})
	quick, quickOffset := openOffsetLedger(t, dsn, Options{SQLiteBusyTimeout: 100 * time.Millisecond})
	secret, info, err := l.CreateToken(ctx, "cron", ReadWrite)
	require.NoError(t, err)

	path, _ := sqlitestore.DSNPath(dsn)
	other, err := os.Open(path + sqlitestore.WriteLockSuffix)
	require.NoError(t, err)
	defer other.Close()
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_EX))
	type answer struct {
		tok *TokenInfo
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		tok, err := l.Authenticate(ctx, secret)
		answered <- answer{tok, err}
	}()
	var a answer
	select {
	case a = <-answered:
	case <-time.After(30 * time.Second): // a guard: the answer needs no lock
		syscall.Flock(int(other.Fd()), syscall.LOCK_UN)
		t.Fatal("Authenticate waits for the write lock")
	}
	require.NoError(t, a.err)
	require.Equal(t, info.ID, a.tok.ID)
	require.True(t, lastTokenUse(t, l, info.ID).IsZero(), "not written while the lock is held")
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_UN))
	l.life.loops.Wait()
	require.False(t, lastTokenUse(t, l, info.ID).IsZero(), "written once the lock was free")

	// A write that gives up (quick's busy timeout) is tried again only
	// after tokenUseRetry, not at each re-check of the token.
	secret, info, err = quick.CreateToken(ctx, "n8n", ReadWrite)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_EX))
	_, err = quick.Authenticate(ctx, secret)
	require.NoError(t, err)
	quick.life.loops.Wait()
	w, _ := quick.WriteLockWaits()
	require.Equal(t, int64(1), w.TimedOut, "the write gave up")
	quickOffset.Add(int64(2 * TokenCheckValidity)) // read again, found unused
	_, err = quick.Authenticate(ctx, secret)
	require.NoError(t, err)
	quick.life.loops.Wait()
	require.Equal(t, WriteLockWaits{Waits: 1, TimedOut: 1}, withoutWaited(quick.WriteLockWaits()), "not tried again yet")
	require.NoError(t, syscall.Flock(int(other.Fd()), syscall.LOCK_UN))
	quickOffset.Add(int64(tokenUseRetry))
	_, err = quick.Authenticate(ctx, secret)
	require.NoError(t, err)
	quick.life.loops.Wait()
	require.False(t, lastTokenUse(t, quick, info.ID).IsZero(), "tried again after tokenUseRetry")
}

// withoutWaited drops the time waited, which varies.
func withoutWaited(w WriteLockWaits, _ bool) WriteLockWaits {
	w.Waited = 0
	return w
}
