package opledger

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// A check that read a token before its revocation committed, and ends
// after RevokeToken's forget, leaves nothing remembered: the token is
// read again, and found revoked, on the next request.
func TestCheckBeganBeforeForgetIsNotRemembered(t *testing.T) {
	var c checkedTokens
	now := time.Now()
	gen := c.generation() // the check begins, and reads the token active
	c.forget()            // meanwhile the revocation commits
	acme := TokenInfo{ID: "tok_1", Tenant: "acme", Name: "n8n"}
	c.remember("h", acme, now, gen)
	if tok, ok := c.lookup("h", now); ok {
		t.Fatalf("a check that began before forget was remembered (tenant %q)", tok.Tenant)
	}
	c.remember("h", acme, now, c.generation())
	if tok, ok := c.lookup("h", now); !ok || tok != acme {
		t.Fatal("a check that began after forget was not remembered")
	}
}

// openOffsetLedger opens a ledger on dsn whose clock runs offset ahead of
// the store's.
func openOffsetLedger(t *testing.T, dsn string, opts Options) (*Ledger, *atomic.Int64) {
	t.Helper()
	offset := new(atomic.Int64)
	opts.Clock = func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }
	l, err := Open(context.Background(), dsn, opts)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, offset
}

// lastTokenUse returns the last use recorded of the token with id (zero
// when none is).
func lastTokenUse(t *testing.T, l *Ledger, id string) time.Time {
	t.Helper()
	list, err := l.Tokens(context.Background(), false)
	require.NoError(t, err)
	for _, tok := range list {
		if tok.ID == id {
			if tok.LastUsedAt == nil {
				return time.Time{}
			}
			return *tok.LastUsedAt
		}
	}
	t.Fatalf("token %s not listed", id)
	return time.Time{}
}

// TestAuthenticateNotesUseInBackground: Authenticate records a token's
// use in a write it does not wait for, and writes it again only once the
// one recorded is TokenUseResolution old; on both stores.
func TestAuthenticateNotesUseInBackground(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, offset := openOffsetLedger(t, st.NewDSN(t), Options{})
			secret, info, err := l.CreateToken(ctx, "cron", ReadWrite)
			require.NoError(t, err)
			_, err = l.Authenticate(ctx, secret)
			require.NoError(t, err)
			l.life.loops.Wait() // the write in the background
			first := lastTokenUse(t, l, info.ID)
			now, err := l.Now(ctx)
			require.NoError(t, err)
			require.WithinDuration(t, now, first, time.Minute)

			offset.Add(int64(30 * time.Minute)) // past the trust in a checked token, within the resolution
			_, err = l.Authenticate(ctx, secret)
			require.NoError(t, err)
			l.life.loops.Wait()
			require.Equal(t, first, lastTokenUse(t, l, info.ID), "a use within the hour is not written again")
			offset.Add(int64(31 * time.Minute))
			_, err = l.Authenticate(ctx, secret)
			require.NoError(t, err)
			l.life.loops.Wait()
			require.GreaterOrEqual(t, lastTokenUse(t, l, info.ID).Sub(first), TokenUseResolution)
		})
	}
}
