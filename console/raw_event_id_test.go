package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestRawEventIDWithSlash: an event whose id (or source) holds a "/",
// typed into the address with the "/" as it is, leads to its page (303
// to the address its links give, the "/" escaped), as an operation's key
// does; an address that names no event so is answered 404, and one
// typed without a session goes to the sign-in page, back there after.
// On both stores.
func TestRawEventIDWithSlash(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})
			for _, ev := range [][2]string{{"forms", "evt/1/a"}, {"shop/eu", "o:9"}} {
				_, err := l.ReceiveEvent(ctx, nil, opledger.Event{Source: ev[0], EventID: ev[1], Type: "t", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			}
			s := signIn(t, srv.URL, token)
			for raw, page := range map[string]string{
				"/events/forms/evt/1/a": "/events/forms/evt%2F1%2Fa",
				"/events/shop/eu/o:9":   "/events/shop%2Feu/o:9",
			} {
				resp, err := s.hc.Get(srv.URL + raw)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusSeeOther, resp.StatusCode, raw)
				require.Equal(t, page, resp.Header.Get("Location"), raw)
				require.Contains(t, s.get(page), "<h1>", raw)
			}
			status, body := s.fetch("/events/forms/evt/2")
			require.Equal(t, http.StatusNotFound, status)
			require.Contains(t, body, "No event has that source and id.")

			anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := anon.Get(srv.URL + "/events/forms/evt/1/a")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, "/login?next=%2Fevents%2Fforms%2Fevt%2F1%2Fa", resp.Header.Get("Location"))
		})
	}
}
