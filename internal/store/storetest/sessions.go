package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testSessions: a session is opened only with an active token, answers
// with its token (tenant, ID and name) until it expires, is closed or its token is
// revoked, is never an API token (nor the other way round), and Compact
// deletes it once expired.
func testSessions(t *testing.T, h Harness) {
	t.Run("Lifetime", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		acme, err := b.ledger.WithTenant("acme")
		require.NoError(t, err)
		token, info, err := acme.CreateToken(b.ctx, "console", opledger.ReadWrite)
		require.NoError(t, err)
		now, err := b.ledger.Now(b.ctx)
		require.NoError(t, err)

		short, expires, err := b.ledger.OpenSession(b.ctx, token, time.Hour)
		require.NoError(t, err)
		require.Regexp(t, `^opls_[A-Za-z0-9_-]{43}$`, short)
		require.WithinDuration(t, now.Add(time.Hour), expires, time.Minute)
		long, _, err := b.ledger.OpenSession(b.ctx, token, 3*time.Hour)
		require.NoError(t, err)
		require.NotEqual(t, short, long)
		for _, s := range []string{short, long} {
			tok, err := b.ledger.SessionToken(b.ctx, s)
			require.NoError(t, err)
			require.Equal(t, "acme", tok.Tenant, "a session is of its token's tenant, whichever ledger opened it")
			require.Equal(t, info.ID, tok.ID)
			require.Equal(t, "console", tok.Name)
		}
		_, err = b.ledger.Authenticate(b.ctx, short)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "a session is not an API token")
		_, err = b.ledger.SessionToken(b.ctx, token)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "an API token is not a session")
		_, err = b.ledger.SessionToken(b.ctx, short+"x")
		require.ErrorIs(t, err, opledger.ErrUnauthorized)

		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Zero(t, res.SessionsExpired, "nothing has expired yet")

		b.clock.Advance(time.Hour)
		_, err = b.ledger.SessionToken(b.ctx, short)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "expired at its end")
		tok, err := b.ledger.SessionToken(b.ctx, long)
		require.NoError(t, err, "the other session lasts longer")
		require.Equal(t, "acme", tok.Tenant)

		b.clock.Advance(time.Second)
		res, err = b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.SessionsExpired)
		_, err = b.ledger.SessionToken(b.ctx, long)
		require.NoError(t, err, "Compact deletes only expired sessions")

		require.NoError(t, b.ledger.CloseSession(b.ctx, long))
		_, err = b.ledger.SessionToken(b.ctx, long)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "closed")
		require.NoError(t, b.ledger.CloseSession(b.ctx, long), "closing twice is fine")
		require.NoError(t, b.ledger.CloseSession(b.ctx, "opls_unknown"), "so is closing an unknown session")
		_, err = b.ledger.Authenticate(b.ctx, token)
		require.NoError(t, err, "closing a session leaves its token alone")
	})
	t.Run("RefusedTokens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.OpenSession(b.ctx, "opl_unknown", time.Hour)
		require.ErrorIs(t, err, opledger.ErrUnauthorized)
		token, info, err := b.ledger.CreateToken(b.ctx, "console", opledger.ReadWrite)
		require.NoError(t, err)
		_, _, err = b.ledger.OpenSession(b.ctx, token, 0)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		_, _, err = b.ledger.OpenSession(b.ctx, token, -time.Hour)
		require.ErrorIs(t, err, opledger.ErrInvalidInput)

		s, _, err := b.ledger.OpenSession(b.ctx, token, time.Hour)
		require.NoError(t, err)
		require.NoError(t, b.ledger.RevokeToken(b.ctx, info.ID))
		_, err = b.ledger.SessionToken(b.ctx, s)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "revoking the token ends its sessions at once")
		_, _, err = b.ledger.OpenSession(b.ctx, token, time.Hour)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "a revoked token opens no session")
	})
	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		token, _, err := b.ledger.CreateToken(b.ctx, "console", opledger.ReadWrite)
		require.NoError(t, err)
		const n = 16
		secrets := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				s, _, err := b.ledger.OpenSession(b.ctx, token, time.Hour)
				if err == nil {
					_, err = b.ledger.SessionToken(b.ctx, s)
				}
				if err == nil && i%2 == 0 {
					err = b.ledger.CloseSession(b.ctx, s)
				}
				secrets[i], errs[i] = s, err
			})
		}
		wg.Wait()
		for i, s := range secrets {
			require.NoError(t, errs[i], "session %d", i)
			_, err := b.ledger.SessionToken(b.ctx, s)
			if i%2 == 0 {
				require.ErrorIs(t, err, opledger.ErrUnauthorized, "session %d was closed", i)
			} else {
				require.NoError(t, err, "session %d is open", i)
			}
		}
	})
}
