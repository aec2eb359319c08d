package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
	"github.com/opledger/opledger/reconciler"
)

// accountUpstream creates a record on every POST and echoes the account
// header it was sent, as Stripe does with Stripe-Account.
func accountUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var creates atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := creates.Add(1)
		w.Header().Set("Stripe-Account", r.Header.Get("Stripe-Account"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": n, "account": r.Header.Get("Stripe-Account")})
	}))
	t.Cleanup(api.Close)
	return api, &creates
}

// A header the route compares is part of the request a repeat must match:
// the same key for another account is refused (422), never answered with
// the first account's result, and nothing is forwarded. The values are
// stored, and masked wherever the operation is shown, in its payload and
// where the upstream's saved answer repeats them (a sensitive field's
// value, see Operation.Masked).
func TestCompareHeadersRefuseAnotherAccount(t *testing.T) {
	t.Parallel()
	const accountA, accountB = "acct_1Hx8AAAAAAAAAAAA", "acct_1Hx8BBBBBBBBBBBB"
	eachStore(t, func(t *testing.T, st testdb.Store) {
		api, creates := accountUpstream(t)
		b := proxyOn(t, openLedger(t, st), proxy.Upstream{Name: "stripe", URL: api.URL,
			CompareHeaders: []string{"stripe-account", "Stripe-Account"}})
		send := func(key, account string) answer {
			t.Helper()
			h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}, "Authorization": {"Bearer sk_test_platform"}}
			if account != "" {
				h.Set("Stripe-Account", account)
			}
			return b.sendWith(t, http.MethodPost, "/v1/charges", h, `{"amount":100}`)
		}

		first := send("k1", accountA)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		again := send("k1", accountA)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		require.Equal(t, first.body, again.body)
		for _, other := range []string{accountB, ""} {
			a := send("k1", other)
			require.Equal(t, http.StatusUnprocessableEntity, a.status, "account %q: %s", other, a.body)
			p := a.problem(t)
			require.Equal(t, httpapi.ProblemTypeBase+"fingerprint_mismatch", p.Type)
			require.Contains(t, p.Detail, "header Stripe-Account")
		}
		require.EqualValues(t, 1, creates.Load(), "neither repeat was forwarded")
		require.Equal(t, http.StatusCreated, send("k2", accountB).status, "a new key for the other account is forwarded")
		require.EqualValues(t, 2, creates.Load())

		op, err := b.ledger.Get(t.Context(), first.header.Get(proxy.HeaderOperation))
		require.NoError(t, err)
		var stored struct {
			Headers map[string][]string `json:"headers"`
		}
		require.NoError(t, json.Unmarshal(op.Payload, &stored))
		require.Equal(t, map[string][]string{"Stripe-Account": {accountA}}, stored.Headers)
		require.Contains(t, op.SensitiveFields, "headers")
		shown, err := json.Marshal(op) // as the API, the console and ops show it
		require.NoError(t, err)
		require.NotContains(t, string(shown), accountA, "neither the payload nor the echoed header shows it")
	})
}

// Without compare_headers, headers are no part of the request: the same
// key with another account header is a repeat, replayed. A route that
// compares a header records nothing of it for a request without it, so
// such requests keep the fingerprint they had before it was configured.
func TestHeadersNotComparedByDefault(t *testing.T) {
	t.Parallel()
	api, creates := accountUpstream(t)
	plain := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "stripe", URL: api.URL})
	compared := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "stripe", URL: api.URL, CompareHeaders: []string{"Stripe-Account"}})
	h := func(account string) http.Header {
		return http.Header{"Idempotency-Key": {"k1"}, "Stripe-Account": {account}}
	}
	require.Equal(t, http.StatusCreated, plain.sendWith(t, http.MethodPost, "/x", h("acct_A"), `{}`).status)
	again := plain.sendWith(t, http.MethodPost, "/x", h("acct_B"), `{}`)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed), "%s", again.body)
	require.EqualValues(t, 1, creates.Load())

	without := compared.sendWith(t, http.MethodPost, "/x", http.Header{"Idempotency-Key": {"k1"}}, `{}`)
	require.Equal(t, http.StatusCreated, without.status, "%s", without.body)
	a, c := plain.only(t), compared.only(t)
	require.JSONEq(t, string(a.Payload), string(c.Payload), "no headers recorded: the same payload as without compare_headers")
	require.Equal(t, a.Fingerprint, c.Fingerprint)
}

// A compared header's value that is not UTF-8 is refused before anything
// is recorded: stored as JSON text, two such values would compare equal.
func TestCompareHeadersRefuseNonUTF8(t *testing.T) {
	t.Parallel()
	api, creates := accountUpstream(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "stripe", URL: api.URL, CompareHeaders: []string{"Stripe-Account"}})
	a := b.sendWith(t, http.MethodPost, "/x", http.Header{"Idempotency-Key": {"k1"}, "Stripe-Account": {"acct_\xff"}}, `{}`)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	require.Contains(t, a.problem(t).Detail, "Stripe-Account header")
	require.Zero(t, b.count(t))
	require.Zero(t, creates.Load())
}

// compare_headers takes HTTP field names, and never a credential, the
// idempotency key or a header the proxy does not pass on as sent; the
// upstream's idempotency header is never a credential's.
func TestCompareHeadersRefused(t *testing.T) {
	t.Parallel()
	l := openLedger(t, testdb.Stores()[0])
	for _, c := range []struct {
		u    proxy.Upstream
		want string
	}{
		{proxy.Upstream{CompareHeaders: []string{"Stripe Account"}}, `compare_headers: "Stripe Account" is not an HTTP header name`},
		{proxy.Upstream{CompareHeaders: []string{"authorization"}}, "compare_headers: Authorization is a credential header"},
		{proxy.Upstream{CompareHeaders: []string{"Cookie"}}, "compare_headers: Cookie is a credential header"},
		{proxy.Upstream{CredentialHeader: "X-Api-Key", CompareHeaders: []string{"x-api-key"}}, "compare_headers: X-Api-Key is a credential header"},
		{proxy.Upstream{CompareHeaders: []string{"Idempotency-Key"}}, "compare_headers: Idempotency-Key carries the idempotency key"},
		{proxy.Upstream{Idempotency: &destination.IdempotencyConfig{Header: "X-Request-Key"}, CompareHeaders: []string{"X-Request-Key"}},
			"compare_headers: X-Request-Key carries the idempotency key"},
		{proxy.Upstream{CompareHeaders: []string{"Connection"}}, "compare_headers: Connection is not passed on as the caller sends it"},
		{proxy.Upstream{CompareHeaders: []string{"X-Forwarded-For"}}, "compare_headers: X-Forwarded-For is not passed on"},
		{proxy.Upstream{CompareHeaders: []string{"Content-Length"}}, "compare_headers: Content-Length is not passed on"},
		{proxy.Upstream{CompareHeaders: []string{"expect"}}, "compare_headers: Expect is not passed on"},
		{proxy.Upstream{CompareHeaders: []string{"host"}}, "compare_headers: Host is not passed on"},
		{proxy.Upstream{CompareHeaders: []string{"Stripe-Account"}, Lookup: &destination.LookupConfig{URL: "http://127.0.0.1:1/x",
			Headers: map[string]string{"stripe-account": "acct_platform"}}}, "compare_headers: Stripe-Account is also in lookup.headers"},

		// The upstream's key would replace the caller's credential.
		{proxy.Upstream{Idempotency: &destination.IdempotencyConfig{Header: "authorization", Retention: destination.Duration(time.Hour)}},
			"idempotency.header Authorization carries the caller's credential"},
		{proxy.Upstream{CredentialHeader: "X-Api-Key", Idempotency: &destination.IdempotencyConfig{Header: "X-Api-Key", Retention: destination.Duration(time.Hour)}},
			"idempotency.header X-Api-Key carries the caller's credential"},
	} {
		c.u.Name, c.u.URL = "crm", "http://127.0.0.1:1"
		_, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{c.u}})
		require.ErrorContains(t, err, "upstream crm: "+c.want)
	}
}

// A header the caller names in Connection is not forwarded, so it is not
// recorded either: the request is compared as the upstream received it.
func TestCompareHeadersAsForwarded(t *testing.T) {
	t.Parallel()
	api, creates := accountUpstream(t)
	b := proxyOn(t, openLedger(t, testdb.Stores()[0]), proxy.Upstream{Name: "stripe", URL: api.URL, CompareHeaders: []string{"Stripe-Account"}})
	first := b.sendWith(t, http.MethodPost, "/x", http.Header{"Idempotency-Key": {"k1"}, "Stripe-Account": {"acct_A"}, "Connection": {"Stripe-Account"}}, `{}`)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	require.JSONEq(t, `{"id":1,"account":""}`, string(first.body), "the upstream got no Stripe-Account")
	again := b.sendWith(t, http.MethodPost, "/x", http.Header{"Idempotency-Key": {"k1"}, "Stripe-Account": {"acct_A"}}, `{}`)
	require.Equal(t, http.StatusUnprocessableEntity, again.status, "this one would reach account A: %s", again.body)
	require.EqualValues(t, 1, creates.Load())
}

// An uncertain request is looked up where it acted: the lookup sends the
// compared headers the request was recorded with (the connected account),
// beside the configured ones, and finds the record there; it still does
// on a route that no longer compares the header (rebuilt without it), and
// never sends a recorded Accept or Content-* header, which are the
// lookup's own.
func TestLookupSendsComparedHeaders(t *testing.T) {
	t.Parallel()
	for _, rebuilt := range []bool{false, true} {
		t.Run(map[bool]string{false: "same route", true: "compare_headers removed"}[rebuilt], func(t *testing.T) {
			t.Parallel()
			eachStore(t, func(t *testing.T, st testdb.Store) {
				lookupSendsComparedHeaders(t, st, rebuilt)
			})
		})
	}
}

func lookupSendsComparedHeaders(t *testing.T, st testdb.Store, rebuilt bool) {
	var (
		mu      sync.Mutex
		records = map[string][]map[string]any{} // by account
		asked   []http.Header
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		account := r.Header.Get("Stripe-Account")
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodGet {
			asked = append(asked, r.Header.Clone())
			var found []map[string]any
			for _, rec := range records[account] {
				if rec["external_ref"] == r.URL.Query().Get("external_ref") {
					found = append(found, rec)
				}
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"items": found})
			return
		}
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		records[account] = append(records[account], map[string]any{"id": "ch_1", "external_ref": in["external_ref"]})
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close() // the answer is lost
		}
	}))
	t.Cleanup(api.Close)
	results := "/items"
	upstream := proxy.Upstream{Name: "stripe", URL: api.URL, CompareHeaders: []string{"Stripe-Account", "Accept"},
		Lookup: &destination.LookupConfig{
			URL:           api.URL + "/charges?external_ref={{urlquery .Payload.body.external_ref}}",
			Headers:       map[string]string{"X-Api-Version": "2026-01"},
			Results:       &results,
			Ref:           "/id",
			Authoritative: true,
			Match:         []destination.MatchConfig{{Record: "/external_ref", Payload: "/body/external_ref"}},
		}}
	l := openLedger(t, st)
	b := proxyOn(t, l, upstream)
	h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}, "Stripe-Account": {"acct_connected"}, "Accept": {"text/csv"}}
	a := b.sendWith(t, http.MethodPost, "/charges", h, `{"external_ref":"order-7"}`)
	require.Equal(t, http.StatusBadGateway, a.status, "%s", a.body)
	if rebuilt {
		require.NoError(t, b.proxy.Close())
		upstream.CompareHeaders = nil
		b = proxyOn(t, l, upstream)
	}

	pass, err := b.proxy.ReconcileOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, pass.Decisions[reconciler.Succeeded], "found in the connected account: %+v", pass)
	mu.Lock()
	require.Len(t, asked, 1)
	require.Equal(t, "acct_connected", asked[0].Get("Stripe-Account"))
	require.Equal(t, "2026-01", asked[0].Get("X-Api-Version"), "the configured headers too")
	require.NotEqual(t, "text/csv", asked[0].Get("Accept"), "the request's Accept is not the lookup's")
	mu.Unlock()
	if !rebuilt {
		again := b.sendWith(t, http.MethodPost, "/charges", h, `{"external_ref":"order-7"}`)
		require.Equal(t, http.StatusOK, again.status, "%s", again.body)
		require.Contains(t, string(again.body), `"destination_ref":"ch_1"`)
	}
}
