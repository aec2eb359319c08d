package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestEchoedSecretsMaskedInHeaders: answer headers that repeat the
// upstream's base path (a bot token), the request's path or query, or the
// caller's credential are shown with those parts masked, in whatever
// case the upstream spells them, while the first caller and every repeat
// get them as the upstream sent them; the other headers are shown as
// they are.
func TestEchoedSecretsMaskedInHeaders(t *testing.T) {
	t.Parallel()
	const (
		botToken    = "SECRET-TOKEN"
		querySecret = "QUERY-SECRET-17"
		bearer      = "sk_live_SECRET_of_account_A"
	)
	eachStore(t, func(t *testing.T, st testdb.Store) {
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			self := "http://" + r.Host + r.URL.Path
			w.Header().Set("Location", self+"?"+r.URL.RawQuery)
			w.Header().Set("Content-Location", strings.ToLower(r.URL.Path)+"/7")
			w.Header().Add("Link", "<"+self+"?page=2>; rel=next")
			w.Header().Add("Link", "<https://docs.example.invalid/guide>; rel=help")
			w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
			w.Header().Set("X-Echo-Token", strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			w.Header().Set("X-Request-Id", "req-4711")
			w.Header().Set("Set-Cookie", "session=SESSION-"+botToken+"; HttpOnly")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"7"}`))
		}))
		t.Cleanup(api.Close)
		b := proxyOn(t, openLedger(t, st), proxy.Upstream{Name: "tg", URL: api.URL + "/bot" + botToken})

		const path = "/loc/items?api_key=" + querySecret
		first := b.send(t, http.MethodPost, path, "k1", "Bearer "+bearer, `{"name":"x"}`)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		location := api.URL + "/bot" + botToken + "/loc/items?api_key=" + querySecret
		require.Equal(t, location, first.header.Get("Location"), "the first caller gets the upstream's answer")
		again := b.send(t, http.MethodPost, path, "k1", "Bearer "+bearer, `{"name":"x"}`)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		require.Equal(t, first.body, again.body)
		for _, name := range []string{"Location", "Content-Location", "Link", "X-Echo-Authorization", "X-Echo-Token",
			"X-Request-Id", "Set-Cookie", "Content-Type"} {
			require.NotEmpty(t, first.header.Values(name), name)
			require.Equal(t, first.header.Values(name), again.header.Values(name), "%s is replayed as the upstream sent it", name)
		}

		shown, err := json.Marshal(b.only(t)) // as the API, the console and ops show it
		require.NoError(t, err)
		for _, secret := range []string{botToken, strings.ToLower(botToken), querySecret, bearer} {
			require.NotContains(t, string(shown), secret)
		}
		var view struct {
			Response struct {
				Header       map[string]json.RawMessage `json:"header"`
				HeaderMasked []struct {
					Name   string          `json:"name"`
					Shown  []string        `json:"shown"`
					Values json.RawMessage `json:"values"`
				} `json:"header_masked"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal(shown, &view))
		require.JSONEq(t, `["req-4711"]`, string(view.Response.Header["X-Request-Id"]), "a header repeating nothing is shown")
		require.JSONEq(t, `["application/json"]`, string(view.Response.Header["Content-Type"]))
		require.JSONEq(t, `"***"`, string(view.Response.Header["Set-Cookie"]), "Set-Cookie stays masked whole")
		masked := map[string][]string{}
		for _, h := range view.Response.HeaderMasked {
			require.JSONEq(t, `"***"`, string(h.Values), h.Name)
			masked[h.Name] = h.Shown
		}
		require.Equal(t, map[string][]string{
			"Location":             {api.URL + "***?***"},
			"Content-Location":     {"***/7"},
			"Link":                 {"<" + api.URL + "***?page=2>; rel=next", "<https://docs.example.invalid/guide>; rel=help"},
			"X-Echo-Authorization": {"***"},
			"X-Echo-Token":         {"***"},
		}, masked)
	})
}

// TestEchoedSecretsMaskedInAnyCase: an upstream that repeats a path
// segment with letters outside ASCII in another case (an address it
// normalised) has it masked too: letters are compared as
// strings.EqualFold compares, not only ASCII ones.
func TestEchoedSecretsMaskedInAnyCase(t *testing.T) {
	t.Parallel()
	st := testdb.Stores()[0]
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		w.Header().Set("X-Owner", "owner="+strings.ToUpper(owner[:3])+owner[3:]) // "ÉMile.müller@…"
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(api.Close)
	b := proxyOn(t, openLedger(t, st), proxy.Upstream{Name: "crm", URL: api.URL})
	first := b.send(t, http.MethodPost, "/%C3%A9mile.m%C3%BCller@example.com/items", "k1", "", `{}`)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	require.Equal(t, "owner=ÉMile.müller@example.com", first.header.Get("X-Owner"), "the caller gets it as sent")
	shown, err := json.Marshal(b.only(t))
	require.NoError(t, err)
	require.NotContains(t, strings.ToLower(string(shown)), "mile.m")
	require.Contains(t, string(shown), `"shown":["owner=***"]`)
}
