package proxy_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/proxy"
)

// An upstream whose credential_header or tenant changed since its
// operations were recorded would give every earlier request another key
// and forward its repeats again: its protected requests are refused, and
// Run does not start, until the change is accepted.
func TestKeyScopeChangeRefused(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.CredentialHeader = "X-Api-Key" })
		h := http.Header{"Idempotency-Key": {"k"}, "X-Api-Key": {"key-A"}, "Authorization": {"Bearer one"}, "Content-Type": {"application/json"}}
		require.Equal(t, http.StatusCreated, b.sendWith(t, http.MethodPost, "/records", h, body1).status)
		require.Equal(t, 1, b.up.Creates())

		// start serves a second proxy of the upstream crm on b's store,
		// as configured by tune, through the ledger l.
		start := func(l *opledger.Ledger, tune func(*proxy.Upstream), accept ...string) (*bundle, *proxy.Proxy) {
			u := proxy.Upstream{Name: "crm", URL: b.up.URL()}
			tune(&u)
			logs := &testrig.LogBuffer{}
			p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, AcceptScopeChange: accept,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() })
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			return &bundle{ledger: l, proxy: p, url: srv.URL, up: b.up, logs: logs}, p
		}
		byAuthorization := func(u *proxy.Upstream) {}
		byAPIKey := func(u *proxy.Upstream) { u.CredentialHeader = "X-Api-Key" }

		// The same request through a proxy scoping by Authorization.
		changed, _ := start(b.ledger, byAuthorization)
		for range 2 {
			a := changed.sendWith(t, http.MethodPost, "/records", h, body1)
			require.Equal(t, http.StatusInternalServerError, a.status, string(a.body))
			var p struct{ Type, Detail string }
			require.NoError(t, json.Unmarshal(a.body, &p))
			require.True(t, strings.HasSuffix(p.Type, "/key_scope_changed"), p.Type)
			require.Contains(t, p.Detail, "nothing was recorded or forwarded")
		}
		require.Equal(t, 1, b.up.Creates(), "nothing was forwarded")
		require.Equal(t, 1, b.count(t), "nothing was recorded")
		require.Equal(t, 1, strings.Count(changed.logs.String(), "key settings changed"), "the refusal is logged once: %s", changed.logs)
		require.Contains(t, changed.logs.String(), `credential_header \"X-Api-Key\", now \"Authorization\"`)

		// Run refuses to start, and says how to accept the change.
		_, refused := start(b.ledger, byAuthorization)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		err = refused.Run(context.Background(), ln, 0)
		require.ErrorIs(t, err, opledger.ErrKeyScopeChanged)
		require.ErrorContains(t, err, "upstream crm: destination proxy:crm: its operation keys were derived with credential_header")
		require.ErrorContains(t, err, "--accept-scope-change crm")
		require.ErrorContains(t, err, "opledger ops list --destination proxy:crm --tenant default --state uncertain,held,in_progress")
		_, err = net.Dial("tcp", ln.Addr().String())
		require.Error(t, err, "the listener is closed")

		// The proxy's tenant is part of the scope too.
		acme, err := b.ledger.WithTenant("acme")
		require.NoError(t, err)
		otherTenant, _ := start(acme, byAPIKey)
		require.Equal(t, http.StatusInternalServerError, otherTenant.sendWith(t, http.MethodPost, "/records", h, body1).status)
		require.Contains(t, otherTenant.logs.String(), `tenant \"default\", now \"acme\"`)

		// Accepted: the new scope is recorded, with a warning, and the
		// request is taken as new (the documented cost of the change).
		accepted, _ := start(b.ledger, byAuthorization, "crm")
		require.Equal(t, http.StatusCreated, accepted.sendWith(t, http.MethodPost, "/records", h, body1).status)
		require.Equal(t, 2, b.up.Creates())
		require.Contains(t, accepted.logs.String(), "as accepted: its earlier requests are taken as new")
		// From then on the old settings are the changed ones.
		old, _ := start(b.ledger, byAPIKey)
		require.Equal(t, http.StatusInternalServerError, old.sendWith(t, http.MethodPost, "/records", h, body1).status)
		require.Equal(t, 2, b.up.Creates())

		_, err = proxy.New(b.ledger, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: b.up.URL()}}, AcceptScopeChange: []string{"billing"}})
		require.EqualError(t, err, `proxy: the scope change to accept names upstream "billing", which is not configured`)
	})
}

// The credential header's spelling is not a change: header names are
// compared canonical.
func TestKeyScopeCanonicalHeader(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	up := fakedest.New(t, fakedest.Options{})
	for _, name := range []string{"x-api-key", "X-API-KEY", "X-Api-Key"} {
		p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: up.URL(), CredentialHeader: name}},
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		srv := httptest.NewServer(p)
		b := &bundle{ledger: l, url: srv.URL}
		a := b.sendWith(t, http.MethodPost, "/records", http.Header{"Idempotency-Key": {"k"}, "X-Api-Key": {"key-A"}}, body1)
		srv.Close()
		require.NoError(t, p.Close())
		require.Equal(t, http.StatusCreated, a.status, "%s: %s", name, a.body)
	}
	require.Equal(t, 1, up.Creates(), "one scope: forwarded once, replayed twice")
}
