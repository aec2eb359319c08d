package proxy_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/proxy"
)

// TestUpstreamConnectionsReused: the default transport keeps an idle
// connection to the upstream for each of n concurrent requests (n ≤
// proxy.MaxIdleConnsPerUpstream), so a second burst of n concurrent
// requests opens no new connections. With net/http's default of 2 idle
// connections per host it would open n-2.
func TestUpstreamConnectionsReused(t *testing.T) {
	t.Parallel()
	const n = 16
	var burst sync.WaitGroup
	up, conns := countingUpstream(t, func(w http.ResponseWriter) {
		// Every request of a burst is held until all n have arrived, so
		// the burst needs n upstream connections at once.
		burst.Done()
		burst.Wait()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"R"}`)
	})

	b := proxyFor(t, proxy.Upstream{Name: "crm", URL: up.URL})

	send := func(round int) {
		burst.Add(n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, err := http.NewRequest(http.MethodPost, b.url+"/records", strings.NewReader(`{"n":1}`))
				if !assertNoError(t, err) {
					return
				}
				req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d-%d", round, i))
				resp, err := http.DefaultClient.Do(req)
				if !assertNoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d", resp.StatusCode)
				}
			}()
		}
		wg.Wait()
	}
	send(1)
	require.EqualValues(t, n, conns.Load(), "the first burst needs n connections")
	send(2)
	// Slack for a connection not yet back in the idle pool when the next
	// burst starts; without idle connections kept it would be n-2.
	require.LessOrEqual(t, conns.Load()-n, int64(n/4), "the second burst reuses the first one's connections")
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestMisdirectedLeavesOtherUpstreamsConnections: a 421 from one
// upstream closes the idle connections of that upstream's transport
// only (so that the repeat goes out on a new connection to it); another
// upstream's idle connection stays open for its next request. Before,
// the upstreams shared one transport and the 421 closed them all.
func TestMisdirectedLeavesOtherUpstreamsConnections(t *testing.T) {
	t.Parallel()
	var misdirected atomic.Bool
	created := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"R"}`)
	}
	crm, crmConns := countingUpstream(t, created)
	mail, mailConns := countingUpstream(t, func(w http.ResponseWriter) {
		if misdirected.CompareAndSwap(false, true) {
			w.WriteHeader(http.StatusMisdirectedRequest)
			return
		}
		created(w)
	})

	b := proxyFor(t, proxy.Upstream{Name: "crm", Prefix: "/crm/", URL: crm.URL}, proxy.Upstream{Name: "mail", Prefix: "/mail/", URL: mail.URL})

	send := func(path, key string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.url+path, strings.NewReader(`{"n":1}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	require.Equal(t, http.StatusCreated, send("/crm/records", "k1"))
	require.Equal(t, http.StatusMisdirectedRequest, send("/mail/messages", "k2"))
	require.Equal(t, http.StatusCreated, send("/crm/records", "k3"))
	require.EqualValues(t, 1, crmConns.Load(), "crm's idle connection outlived mail's 421")
	require.Equal(t, http.StatusCreated, send("/mail/messages", "k2"))
	require.EqualValues(t, 2, mailConns.Load(), "the repeat went out on a new connection to mail")
}

// countingUpstream starts an upstream that reads each request's body and
// answers it with answer, and counts the connections opened to it.
func countingUpstream(t *testing.T, answer func(w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		answer(w)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	return up, &conns
}
