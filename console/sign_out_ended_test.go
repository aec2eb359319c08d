package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
)

// TestSignOutAfterSessionEnded: signing out of a session that has ended
// meanwhile (expired, signed out in another tab, its token revoked) does
// what was asked: the browser's cookie is cleared and it is sent to the
// sign-in page, not told that "nothing was done" and to look again before
// deciding, with the dead cookie kept. On both stores.
func TestSignOutAfterSessionEnded(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			l, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})
			s := signIn(t, srv.URL, token)
			csrf := csrfField.FindStringSubmatch(s.get("/"))
			require.Len(t, csrf, 2)
			tok, err := l.Authenticate(context.Background(), token)
			require.NoError(t, err)
			require.NoError(t, l.RevokeToken(context.Background(), tok.ID))

			resp, err := s.hc.PostForm(srv.URL+"/logout", url.Values{"csrf": {csrf[1]}})
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, "/login", resp.Header.Get("Location"))
			cleared := false
			for _, ck := range resp.Cookies() {
				if ck.Name == console.CookieName && ck.MaxAge < 0 {
					cleared = true
				}
			}
			require.True(t, cleared, "the session cookie is cleared")
			u, err := url.Parse(srv.URL)
			require.NoError(t, err)
			require.Empty(t, s.hc.Jar.Cookies(u), "the browser keeps no session cookie")
		})
	}
}
