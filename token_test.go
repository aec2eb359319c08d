package opledger_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// twoProcesses opens one SQLite ledger twice, as a server and the command
// line beside it would: the server's clock moves only when told.
func twoProcesses(t *testing.T) (server, cli *opledger.Ledger, clock *manualClock) {
	t.Helper()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "ledger.db")
	clock = newManualClock()
	server, err := opledger.Open(ctx, dsn, opledger.Options{Clock: clock.Map})
	require.NoError(t, err)
	t.Cleanup(func() { server.Close() })
	cli, err = opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return server, cli, clock
}

// A token revoked by another process keeps working on a server that found
// it active until TokenCheckValidity has passed, and not a moment longer.
func TestRevokedElsewhereStopsWithinCheckValidity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, cli, clock := twoProcesses(t)
	secret, info, err := cli.CreateToken(ctx, "n8n", opledger.ReadWrite)
	require.NoError(t, err)

	tok, err := server.Authenticate(ctx, secret)
	require.NoError(t, err, "a new token works at once")
	require.Equal(t, [3]string{info.ID, "acme", "n8n"}, [3]string{tok.ID, tok.Tenant, tok.Name})
	require.NoError(t, cli.RevokeToken(ctx, info.ID))

	clock.Advance(opledger.TokenCheckValidity - time.Millisecond)
	tok, err = server.Authenticate(ctx, secret)
	require.NoError(t, err, "still trusted from the last check")
	require.Equal(t, "acme", tok.Tenant)
	require.Equal(t, info.ID, tok.ID, "the remembered token is the same token")

	clock.Advance(time.Millisecond)
	_, err = server.Authenticate(ctx, secret)
	require.ErrorIs(t, err, opledger.ErrUnauthorized)
	_, err = server.Authenticate(ctx, secret)
	require.ErrorIs(t, err, opledger.ErrUnauthorized, "a revoked token is not remembered as active")
}

// Revoking through the Ledger that checks the token takes effect at once.
func TestRevokedHereStopsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, _, _ := twoProcesses(t)
	secret, info, err := server.CreateToken(ctx, "zapier", opledger.ReadWrite)
	require.NoError(t, err)
	_, err = server.Authenticate(ctx, secret)
	require.NoError(t, err)
	require.NoError(t, server.RevokeToken(ctx, info.ID))
	_, err = server.Authenticate(ctx, secret)
	require.ErrorIs(t, err, opledger.ErrUnauthorized)
}

// A clock set back does not stretch the trust in a token checked at a
// later time.
func TestClockSetBackChecksAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, cli, clock := twoProcesses(t)
	secret, info, err := cli.CreateToken(ctx, "cron", opledger.ReadWrite)
	require.NoError(t, err)
	_, err = server.Authenticate(ctx, secret)
	require.NoError(t, err)
	require.NoError(t, cli.RevokeToken(ctx, info.ID))
	clock.Advance(-time.Hour)
	_, err = server.Authenticate(ctx, secret)
	require.ErrorIs(t, err, opledger.ErrUnauthorized)
}

// Requests under way while a token is revoked through the same Ledger
// cannot leave it trusted: once RevokeToken returns, the token is refused,
// however the checks in flight interleaved with the revocation.
func TestRevokedHereWhileInUseStopsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server, _, _ := twoProcesses(t)
	for round := range 40 {
		secret, info, err := server.CreateToken(ctx, "zapier", opledger.ReadWrite)
		require.NoError(t, err)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						_, _ = server.Authenticate(ctx, secret)
					}
				}
			})
		}
		require.NoError(t, server.RevokeToken(ctx, info.ID))
		close(stop)
		wg.Wait()
		_, err = server.Authenticate(ctx, secret)
		require.ErrorIs(t, err, opledger.ErrUnauthorized, "round %d", round)
	}
}

// TestTokenAccessJSON: a token's access reads as it is written, in the
// words tokens list --json uses, and nothing else is taken.
func TestTokenAccessJSON(t *testing.T) {
	t.Parallel()
	for a, word := range map[opledger.TokenAccess]string{opledger.ReadWrite: "read-write", opledger.ReadOnly: "read-only", opledger.Worker: "worker"} {
		require.Equal(t, word, a.String())
		b, err := json.Marshal(opledger.TokenInfo{ID: "tok_1", Access: a})
		require.NoError(t, err)
		require.Contains(t, string(b), `"access":"`+a.String()+`"`)
		var back opledger.TokenInfo
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, a, back.Access)
	}
	var info opledger.TokenInfo
	err := json.Unmarshal([]byte(`{"access":"admin"}`), &info)
	require.ErrorContains(t, err, `token access must be read-write, read-only or worker, not "admin"`)
	_, err = json.Marshal(opledger.TokenInfo{ID: "tok_1", Access: 3})
	require.ErrorContains(t, err, "token access 3 is not one of read-write, read-only, worker")
	require.Equal(t, "TokenAccess(3)", opledger.TokenAccess(3).String())
}
