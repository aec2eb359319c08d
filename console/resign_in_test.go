package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// sessionSecret is the session cookie the client of s holds.
func (s *consoleSession) sessionSecret() string {
	s.t.Helper()
	u, err := url.Parse(s.base)
	require.NoError(s.t, err)
	for _, ck := range s.hc.Jar.Cookies(u) {
		if ck.Name == console.CookieName {
			return ck.Value
		}
	}
	s.t.Fatal("no session cookie")
	return ""
}

// TestSignInAgainEndsOldSession: signing in again from a browser that is
// signed in (another token, or the same one) ends the session it held,
// on the server, rather than leaving it open for its 12 hours beside the
// new one; a sign-in refused leaves it as it was. On both stores.
func TestSignInAgainEndsOldSession(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			l, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})
			ctx := context.Background()
			other, _, err := l.CreateToken(ctx, "wall-screen", opledger.ReadOnly)
			require.NoError(t, err)
			s := signIn(t, srv.URL, token)
			first := s.sessionSecret()

			code, _ := s.post("/login", url.Values{"token": {"opl_wrong"}})
			require.Equal(t, http.StatusUnauthorized, code)
			require.Equal(t, first, s.sessionSecret(), "a refused sign-in leaves the browser's session")
			_, err = l.SessionToken(ctx, first)
			require.NoError(t, err, "and its session open")

			code, _ = s.post("/login", url.Values{"token": {other}})
			require.Equal(t, http.StatusSeeOther, code)
			second := s.sessionSecret()
			require.NotEqual(t, first, second)
			_, err = l.SessionToken(ctx, first)
			require.ErrorIs(t, err, opledger.ErrUnauthorized, "the session signed in before has ended")
			tok, err := l.SessionToken(ctx, second)
			require.NoError(t, err)
			require.Equal(t, "wall-screen", tok.Name)
			require.Contains(t, s.get("/"), "read-only", "the browser is signed in with the new token")

			code, _ = s.post("/login", url.Values{"token": {token}})
			require.Equal(t, http.StatusSeeOther, code)
			_, err = l.SessionToken(ctx, second)
			require.ErrorIs(t, err, opledger.ErrUnauthorized, "signing in again with a token ends the session too")
		})
	}
}

// TestSignInAgainOpensNoSessionBeforeTheOldEnds: signing in again ends
// the session the browser held before it opens the new one, so that a
// store failing to end it leaves no new session behind, unused until it
// expires (closing the new one could fail too). The old session's row is
// locked here, as another transaction would hold it: while the sign-in
// waits to end it, no new session is stored; once the lock goes, the
// sign-in completes. On PostgreSQL, whose row locks let the sign-in wait
// mid-way.
func TestSignInAgainOpensNoSessionBeforeTheOldEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	_, token, srv := storeConsole(t, dsn, opledger.Options{})
	s := signIn(t, srv.URL, token)
	first := s.sessionSecret()

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM sessions FOR UPDATE) s`).Scan(&n))
	require.Equal(t, 1, n)
	done := make(chan int)
	go func() {
		resp, err := s.hc.PostForm(srv.URL+"/login", url.Values{"token": {token}})
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	testdb.WaitBlockedBy(t, holder, "ending the session signed in before")
	watcher, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer watcher.Close(ctx)
	require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM sessions`).Scan(&n))
	require.Equal(t, 1, n, "no new session while the old one has not ended")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, http.StatusSeeOther, <-done)
	require.NotEqual(t, first, s.sessionSecret())
	require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM sessions`).Scan(&n))
	require.Equal(t, 1, n, "the new session only")
}
