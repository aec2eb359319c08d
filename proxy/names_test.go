package proxy_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// Two proxies on one store, each with one upstream under the default name
// (opledger proxy --upstream twice): the second never replays the first
// one's answer from another API, and says why. With their own names they
// do not meet at all.
func TestSameNameOtherUpstreamRefused(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		l := openLedger(t, st)
		crm, mail := newRecorder(t), newRecorder(t)
		a := proxyOn(t, l, proxy.Upstream{Name: proxy.DefaultUpstreamName, URL: crm.srv.URL})
		b := proxyOn(t, l, proxy.Upstream{Name: proxy.DefaultUpstreamName, URL: mail.srv.URL})
		require.Equal(t, http.StatusCreated, a.send(t, http.MethodPost, "/records", "key-1", token, body1).status)

		got := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusInternalServerError, got.status, "%s", got.body)
		require.Empty(t, got.header.Get(proxy.HeaderReplayed))
		p := got.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_conflict", p.Type)
		require.NotEmpty(t, p.Title)
		require.Contains(t, p.Detail, "its own name")
		require.NotContains(t, string(got.body), crm.srv.URL, "the other upstream's URL is not shown to callers")
		require.Empty(t, mail.requests(), "nothing forwarded")

		// The same upstream written another way is the same API.
		same := proxyOn(t, l, proxy.Upstream{Name: proxy.DefaultUpstreamName, URL: crm.srv.URL + "/"})
		require.Equal(t, "true", same.send(t, http.MethodPost, "/records", "key-1", token, body1).header.Get(proxy.HeaderReplayed))

		named := proxyOn(t, l, proxy.Upstream{Name: "mail", URL: mail.srv.URL})
		require.Equal(t, http.StatusCreated, named.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		require.Len(t, mail.requests(), 1, "under its own name the key is its own")
		require.Len(t, crm.requests(), 1)
	})
}
