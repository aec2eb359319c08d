package proxy_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/proxy"
	"github.com/opledger/opledger/reconciler"
)

type bundle struct {
	ledger *opledger.Ledger
	proxy  *proxy.Proxy
	url    string
	up     *fakedest.Server
	logs   *testrig.LogBuffer
	// offset is how far the ledger's clock runs ahead of the store's.
	offset *atomic.Int64
}

// setup starts a fake upstream, a ledger on the store and the proxy in
// front of the upstream; tune adjusts the upstream's configuration. The
// ledger's clock runs b.offset ahead of the store's.
func setup(t testing.TB, st testdb.Store, opts fakedest.Options, tune func(u *proxy.Upstream, up *fakedest.Server)) *bundle {
	t.Helper()
	offset := &atomic.Int64{}
	clock := func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }
	up := fakedest.New(t, opts)
	u := proxy.Upstream{Name: "crm", URL: up.URL()}
	if tune != nil {
		tune(&u, up)
	}
	policies, err := proxy.RetryPolicies([]proxy.Upstream{u})
	require.NoError(t, err)
	l, err := opledger.Open(context.Background(), st.NewDSN(t), opledger.Options{DestinationRetryPolicies: policies, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	logs := &testrig.LogBuffer{}
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &bundle{ledger: l, proxy: p, url: srv.URL, up: up, logs: logs, offset: offset}
}

// lookupByExternalRef declares the fake upstream's search as an
// authoritative lookup matching the body's external_ref.
func lookupByExternalRef(u *proxy.Upstream, up *fakedest.Server) {
	results := "/items"
	u.Lookup = &destination.LookupConfig{
		URL:           up.URL() + "/records?external_ref={{urlquery .Payload.body.external_ref}}",
		Results:       &results,
		Ref:           "/id",
		Authoritative: true,
		Match:         []destination.MatchConfig{{Record: "/external_ref", Payload: "/body/external_ref"}},
	}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) problem(t *testing.T) httpapi.Problem {
	t.Helper()
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), "body: %s", a.body)
	var p httpapi.Problem
	require.NoError(t, json.Unmarshal(a.body, &p))
	return p
}

// send makes a request through the proxy; key and auth are omitted when
// empty.
func (b *bundle) send(t *testing.T, method, path, key, auth, body string) answer {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	if auth != "" {
		h.Set("Authorization", auth)
	}
	return b.sendWith(t, method, path, h, body)
}

// sendWith makes a request through the proxy with the headers h.
func (b *bundle) sendWith(t *testing.T, method, path string, h http.Header, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{resp.StatusCode, resp.Header, data}
}

// only returns the one operation the proxy recorded.
func (b *bundle) only(t *testing.T) *opledger.Operation {
	t.Helper()
	page, err := b.ledger.List(context.Background(), opledger.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	op, err := b.ledger.Get(context.Background(), page.Items[0].Key)
	require.NoError(t, err)
	return op
}

func (b *bundle) count(t *testing.T) int {
	t.Helper()
	page, err := b.ledger.List(context.Background(), opledger.ListOptions{})
	require.NoError(t, err)
	return len(page.Items)
}

func (b *bundle) reconcile(t *testing.T) reconciler.Pass {
	t.Helper()
	pass, err := b.proxy.ReconcileOnce(context.Background())
	require.NoError(t, err)
	return pass
}

func eachStore(t *testing.T, fn func(t *testing.T, st testdb.Store)) {
	t.Helper()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, st)
		})
	}
}

const (
	token = "Bearer sk_live_SECRET_of_account_A"
	body1 = `{"external_ref":"order-17","amount":120}`
	body2 = `{"external_ref":"order-17","amount":999}`
)

// First request forwarded and saved; a repeat gets the saved answer byte
// for byte with Idempotent-Replayed, and the upstream is not called again.
func TestFirstRequestAndReplay(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
		require.Empty(t, first.header.Get(proxy.HeaderReplayed))
		require.JSONEq(t, `{"id":"R1","external_ref":"order-17","amount":120}`, string(first.body))
		require.Equal(t, 1, b.up.Creates())

		for range 2 {
			again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
			require.Equal(t, http.StatusCreated, again.status)
			require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
			require.Equal(t, first.body, again.body, "byte for byte")
			require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
			require.Equal(t, first.header.Get("Date"), again.header.Get("Date"), "the saved headers are replayed")
		}
		require.Equal(t, 1, b.up.Creates(), "the upstream was called once")

		op := b.only(t)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "R1", op.DestinationRef, "the ref is read from the answer at /id")
		require.Equal(t, "proxy:crm", op.Destination)
		host, _ := os.Hostname()
		attempts, err := b.ledger.Attempts(context.Background(), op.Key)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("proxy@%s:%d", host, os.Getpid()), attempts[0].Worker, "which proxy process sent it")
		require.NotContains(t, op.Key, "key-1", "the caller's key is stored only as a digest")
		require.NoError(t, opledger.ValidateKey(op.Key))
		var payload map[string]any
		require.NoError(t, json.Unmarshal(op.Payload, &payload))
		require.Equal(t, "POST", payload["method"])
		require.Equal(t, "/records", payload["path"])
		require.Equal(t, map[string]any{"external_ref": "order-17", "amount": float64(120)}, payload["body"])
		require.Equal(t, "Bearer sk_live_SECRET_of_account_A", b.up.CreateHeaders()[0].Get("Authorization"),
			"the caller's Authorization reaches the upstream untouched")
		require.Empty(t, b.up.CreateHeaders()[0].Get("Idempotency-Key"), "the caller's key is the proxy's, not the upstream's")
	})
}

// A protected request without Idempotency-Key is refused with 400, unless
// the upstream allows it through unprotected.
func TestMissingKey(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		a := b.send(t, http.MethodPost, "/records", "", token, body1)
		require.Equal(t, http.StatusBadRequest, a.status)
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"idempotency_key_required", p.Type)
		require.Contains(t, p.Detail, "needs an Idempotency-Key header")
		a = b.send(t, http.MethodPatch, "/records", `"`+strings.Repeat("k", 300)+`"`, token, body1)
		require.Equal(t, http.StatusBadRequest, a.status)
		require.Equal(t, httpapi.ProblemTypeBase+"invalid_idempotency_key", a.problem(t).Type)
		require.Equal(t, 0, b.up.Creates())
		require.Equal(t, 0, b.count(t))

		open := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.AllowMissingKey = true })
		for range 2 {
			a = open.send(t, http.MethodPost, "/records", "", token, body1)
			require.Equal(t, http.StatusCreated, a.status)
		}
		require.Equal(t, 2, open.up.Creates(), "without a key nothing protects the request")
		require.Equal(t, 0, open.count(t))
	})
}

// The same key with another body or path is 422; the upstream is not called.
func TestMismatch(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPost, "/records", body2},
			{http.MethodPost, "/records/", body1},
			{http.MethodPost, "/records?draft=1", body1},
			{http.MethodPatch, "/records", body1},
		} {
			a := b.send(t, c.method, c.path, "key-1", token, c.body)
			require.Equal(t, http.StatusUnprocessableEntity, a.status, "%+v", c)
			p := a.problem(t)
			require.Equal(t, httpapi.ProblemTypeBase+"fingerprint_mismatch", p.Type)
			require.Equal(t, opledger.StateSucceeded, p.State)
		}
		require.Equal(t, 1, b.up.Creates())
		require.Equal(t, "true", b.send(t, http.MethodPost, "/records", "key-1", token, body1).header.Get(proxy.HeaderReplayed),
			"the original is kept")
	})
}

// A repeat while the first request is in flight is 409 with Retry-After:
// 1 s while the forward may still run (or extend its lease), then until
// the claim's lease ends.
func TestInFlight(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		arrived := b.up.Arrivals()
		b.up.Fail(fakedest.Block)
		done := make(chan answer, 1)
		go func() { done <- b.send(t, http.MethodPost, "/records", "key-1", token, body1) }()
		<-arrived
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, a.status)
		require.Equal(t, "1", a.header.Get("Retry-After"))
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"in_progress", p.Type)
		require.Equal(t, opledger.StateInProgress, p.State)
		// Once the claim is older than the upstream's timeout and an
		// extension's interval (a third of the lease: 30 s), and a little,
		// its forward has ended: the proxy that made it stopped before
		// recording how, and the repeat waits for the lease (the timeout
		// and a minute) to run out, not a second at a time.
		b.offset.Store(int64(31 * time.Second))
		require.Equal(t, "1", b.send(t, http.MethodPost, "/records", "key-1", token, body1).header.Get("Retry-After"),
			"a relay may extend the lease up to 30 s after the claim")
		b.offset.Store(int64(33 * time.Second))
		a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, a.status)
		wait, err := strconv.Atoi(a.header.Get("Retry-After"))
		require.NoError(t, err)
		require.True(t, wait > 30 && wait <= 57, "until the lease ends, 57 s after: %d", wait)
		b.offset.Store(0)
		b.up.Release()
		first := <-done
		require.Equal(t, http.StatusCreated, first.status)
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, first.body, again.body)
		require.Equal(t, 1, b.up.Creates())
	})
}

// 50 concurrent identical requests: one upstream call; every caller gets
// the same answer or a 409.
func TestConcurrentIdenticalRequests(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		const n = 50
		answers := make(chan answer, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers <- b.send(t, http.MethodPost, "/records", "burst", token, body1)
			}()
		}
		close(start)
		wg.Wait()
		close(answers)
		var bodies [][]byte
		conflicts := 0
		for a := range answers {
			switch a.status {
			case http.StatusCreated:
				bodies = append(bodies, a.body)
			case http.StatusConflict:
				conflicts++
				require.Equal(t, httpapi.ProblemTypeBase+"in_progress", a.problem(t).Type)
			default:
				t.Fatalf("unexpected answer %d: %s", a.status, a.body)
			}
		}
		require.NotEmpty(t, bodies)
		for _, body := range bodies {
			require.Equal(t, bodies[0], body)
		}
		require.Equal(t, 1, b.up.Creates(), "exactly one upstream call")
		require.Equal(t, 1, b.up.Effects())
		t.Logf("%d callers got the answer, %d got 409", len(bodies), conflicts)
	})
}

// A response lost after the request was written: uncertain, 502; the
// reconciler's lookup finds the record; a repeat gets 200 with its ref.
func TestLostResponseReconciledByLookup(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, lookupByExternalRef)
		b.up.Fail(fakedest.LoseResponse)
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusBadGateway, a.status)
		p := a.problem(t)
		require.Equal(t, httpapi.ProblemTypeBase+"upstream_response_lost", p.Type)
		require.Equal(t, opledger.StateUncertain, p.State)
		require.Contains(t, p.Detail, "never forwarded again unprotected")
		require.Equal(t, opledger.StateUncertain, b.only(t).State)

		a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, a.status, "unresolved: no second forward")
		require.Equal(t, opledger.StateUncertain, a.problem(t).State)
		require.NotEmpty(t, a.header.Get("Retry-After"))

		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Succeeded])
		a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		require.Equal(t, "true", a.header.Get(proxy.HeaderReplayed))
		var got struct {
			State          string `json:"state"`
			DestinationRef string `json:"destination_ref"`
		}
		require.NoError(t, json.Unmarshal(a.body, &got))
		require.Equal(t, "succeeded", got.State)
		require.Equal(t, "R1", got.DestinationRef)
		require.Equal(t, 1, b.up.Creates(), "the upstream was called once")
		require.Equal(t, 1, b.up.Effects())
	})
}

// A repeat of an uncertain request is told to come back after the
// reconciler's next pass; once a failed lookup has made the reconciler
// back off, after the next check it scheduled, not before.
func TestUncertainRetryAfterFollowsNextCheck(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, lookupByExternalRef)
		b.up.Fail(fakedest.LoseResponse)
		require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		retryAfter := func() int {
			t.Helper()
			a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
			require.Equal(t, http.StatusConflict, a.status)
			n, err := strconv.Atoi(a.header.Get("Retry-After"))
			require.NoError(t, err, "%v", a.header)
			return n
		}
		before := retryAfter()
		b.up.FailLookups(1)
		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Wait])
		after := retryAfter()
		require.Greater(t, after, before, "the next check is later than the next pass")
	})
}

// A lost answer to a request whose content cannot fill the lookup (a form
// body, where the lookup reads .Payload.body, which only a JSON body
// has) is held at the first pass, with the reason, instead of being
// tried again with backoff for many minutes as if the lookup might
// pass.
func TestLookupThatCannotBeMadeHolds(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		var lookups atomic.Int32
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet {
				lookups.Add(1)
				return
			}
			io.Copy(io.Discard, r.Body)
			// Acted, then the connection broke.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		t.Cleanup(up.Close)
		results := "/items"
		b := proxyOn(t, openLedger(t, st), proxy.Upstream{Name: "crm", URL: up.URL, Lookup: &destination.LookupConfig{
			URL:     up.URL + "/records?external_ref={{urlquery .Payload.body.external_ref}}",
			Results: &results, Ref: "/id", Authoritative: true,
			Match: []destination.MatchConfig{{Record: "/external_ref", Payload: "/body/external_ref"}},
		}})
		h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Idempotency-Key": {"key-1"}, "Authorization": {token}}
		a := b.sendWith(t, http.MethodPost, "/records", h, "external_ref=ord-9&amount=100")
		require.Equal(t, http.StatusBadGateway, a.status, "%s", a.body)
		require.Equal(t, opledger.StateUncertain, b.only(t).State)

		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Held])
		op := b.only(t)
		require.Equal(t, opledger.StateHeld, op.State)
		tl, err := b.ledger.Timeline(context.Background(), op.Key)
		require.NoError(t, err)
		held := tl[len(tl)-1]
		require.Equal(t, opledger.StateHeld, held.To)
		require.Contains(t, held.Evidence, "no lookup can be made for this operation")
		require.Contains(t, held.Evidence, "render lookup.url")
		require.Zero(t, lookups.Load(), "no lookup was sent")
	})
}

// The proxy's reconciler looks up for the proxy's own tenant only: its
// lookups carry the upstream's credentials, and another tenant sharing the
// store (through opledger serve) must not learn what the upstream holds by
// recording an uncertain operation that names the proxy's destination.
func TestReconcilerKeepsToItsTenant(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, lookupByExternalRef)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		mine := b.only(t)

		other, err := b.ledger.WithTenant("intruder")
		require.NoError(t, err)
		ctx := context.Background()
		_, _, err = other.Record(ctx, opledger.Intent{Key: "probe:1", Action: mine.Action, Destination: mine.Destination, Payload: mine.Payload})
		require.NoError(t, err)
		c, err := other.Claim(ctx, "probe:1", opledger.ClaimOptions{Dispatch: true})
		require.NoError(t, err)
		_, err = other.Report(ctx, "probe:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)

		pass := b.reconcile(t)
		require.Zero(t, pass.Examined, "another tenant's operation is not the proxy's to look up")
		require.Zero(t, b.up.Lookups())
		op, err := other.Get(ctx, "probe:1")
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Empty(t, op.DestinationRef)
	})
}

// An upstream's owner is its operations' owner: a held one waits for it.
// An owner the ledger could not store is refused when the proxy starts.
func TestUpstreamOwner(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.Owner = "crm-team" })
		b.up.Fail(fakedest.LoseResponse)
		require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Held])
		op := b.only(t)
		require.Equal(t, opledger.StateHeld, op.State)
		require.Equal(t, "crm-team", op.Owner)

		_, err := proxy.New(b.ledger, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: b.up.URL(), Owner: "a\x00b"}}})
		require.ErrorContains(t, err, "upstream crm: owner: invalid input: owner must be UTF-8 text without NUL bytes")
	})
}

// Without lookup or protection a lost response is held; repeats get 409
// and the upstream is called once.
func TestLostResponseHeldWithoutMeans(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		b.up.Fail(fakedest.LoseResponse)
		require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Held])
		for range 3 {
			a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
			require.Equal(t, http.StatusConflict, a.status)
			p := a.problem(t)
			require.Equal(t, httpapi.ProblemTypeBase+"invalid_state", p.Type)
			require.Equal(t, opledger.StateHeld, p.State)
			require.Contains(t, p.Detail, "waits for a person")
		}
		require.Equal(t, opledger.StateHeld, b.only(t).State)
		require.Equal(t, 1, b.up.Creates())
	})
}

// A timeout after the request was written is 504 and uncertain.
func TestTimeoutIsUncertain(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) {
			u.Timeout = destination.Duration(200 * time.Millisecond)
		})
		b.up.Fail(fakedest.Hang)
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusGatewayTimeout, a.status)
		require.Equal(t, opledger.StateUncertain, a.problem(t).State)
		require.Equal(t, "uncertain", a.header.Get(proxy.HeaderState))
		require.Equal(t, opledger.StateUncertain, b.only(t).State)
		require.Equal(t, 1, b.up.Creates())
	})
}

// An upstream that declares an idempotency key gets a protected
// re-forward under the same derived key; it deduplicates.
func TestLostResponseProtectedReforward(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{Dedup: true}, func(u *proxy.Upstream, _ *fakedest.Server) {
			u.Idempotency = &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * time.Hour)}
		})
		b.up.Fail(fakedest.LoseResponse)
		require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Retry])
		op := b.only(t)
		require.Equal(t, opledger.StatePending, op.State)
		require.True(t, op.Protected)

		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusOK, a.status, "the upstream answers its deduplicated record: %s", a.body)
		require.JSONEq(t, `{"id":"R1","external_ref":"order-17","amount":120}`, string(a.body))
		keys := b.up.Keys()
		require.Len(t, keys, 2)
		require.Equal(t, keys[0], keys[1], "the same key on both forwards")
		require.Equal(t, op.IdempotencyKey(), keys[0], "the ledger's derived key, never the caller's")
		require.Equal(t, 1, b.up.Effects())
		require.Equal(t, opledger.StateSucceeded, b.only(t).State)
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, a.body, again.body)
		require.Equal(t, 2, b.up.Creates())
	})
}

// A 4xx rejection decided the request: saved and replayed.
func TestRejectionReplayed(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		b.up.Fail(fakedest.Invalid)
		first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusUnprocessableEntity, first.status)
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusUnprocessableEntity, again.status)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		require.Equal(t, first.body, again.body)
		require.Equal(t, 1, b.up.Creates())
		op := b.only(t)
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureRejected, op.FailureKind)
	})
}

// With credential_header, a 401 is passed through and not saved: the
// upstream did not take the caller's credential, so it decided nothing.
// The same key with a refreshed access token, in the same scope, is
// forwarded and its answer saved (a saved 401 was replayed for ever).
func TestUnauthorizedNotSaved(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.CredentialHeader = "X-Account" })
		send := func(bearer string) answer {
			t.Helper()
			return b.sendWith(t, http.MethodPost, "/records", http.Header{"Content-Type": {"application/json"},
				"Idempotency-Key": {"inv-17"}, "X-Account": {"acct-1"}, "Authorization": {"Bearer " + bearer}}, body1)
		}
		b.up.Fail(fakedest.Unauthorized)
		a := send("expired")
		require.Equal(t, http.StatusUnauthorized, a.status)
		require.Equal(t, `Bearer error="invalid_token"`, a.header.Get("WWW-Authenticate"), "the upstream's answer, passed through")
		require.Empty(t, a.header.Get(proxy.HeaderReplayed))
		require.Equal(t, opledger.StatePending, b.only(t).State)

		a = send("fresh")
		require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
		require.Empty(t, a.header.Get(proxy.HeaderReplayed))
		a = send("fresh")
		require.Equal(t, http.StatusCreated, a.status)
		require.Equal(t, "true", a.header.Get(proxy.HeaderReplayed))
		require.Equal(t, 2, b.up.Creates())
		require.Equal(t, 1, b.up.Effects())
		require.Equal(t, opledger.StateSucceeded, b.only(t).State)

		// Scoped by the whole Authorization header (the default), a
		// refreshed token is another key: the 401 is decided, saved and
		// replayed, and nothing stays pending.
		d := setup(t, st, fakedest.Options{}, nil)
		d.up.Fail(fakedest.Unauthorized)
		require.Equal(t, http.StatusUnauthorized, d.send(t, http.MethodPost, "/records", "inv-18", "Bearer expired", body1).status)
		again := d.send(t, http.MethodPost, "/records", "inv-18", "Bearer expired", body1)
		require.Equal(t, http.StatusUnauthorized, again.status)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		require.Equal(t, opledger.StateFailed, d.only(t).State)
		require.Equal(t, http.StatusCreated, d.send(t, http.MethodPost, "/records", "inv-18", "Bearer fresh", body1).status, "a new scope")
	})
}

// 429 and 503 are passed through with Retry-After and not saved: a repeat
// forwards again.
func TestRetryableNotSaved(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		b.up.SetRetryAfter("0")
		b.up.Fail(fakedest.TooMany, fakedest.Unavailable)
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusTooManyRequests, a.status)
		require.Equal(t, "0", a.header.Get("Retry-After"))
		require.Empty(t, a.header.Get(proxy.HeaderReplayed))
		require.Equal(t, opledger.StatePending, b.only(t).State)
		a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusServiceUnavailable, a.status)
		a = b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusCreated, a.status)
		require.Empty(t, a.header.Get(proxy.HeaderReplayed))
		require.Equal(t, 3, b.up.Creates())
		require.Equal(t, 1, b.up.Effects())
		require.Equal(t, "true", b.send(t, http.MethodPost, "/records", "key-1", token, body1).header.Get(proxy.HeaderReplayed))

		// A Retry-After in the future holds repeats back until then.
		b.up.SetRetryAfter("120")
		b.up.Fail(fakedest.TooMany)
		require.Equal(t, http.StatusTooManyRequests, b.send(t, http.MethodPost, "/records", "key-2", token, body1).status)
		a = b.send(t, http.MethodPost, "/records", "key-2", token, body1)
		require.Equal(t, http.StatusConflict, a.status)
		require.Equal(t, httpapi.ProblemTypeBase+"not_due", a.problem(t).Type)
		require.Equal(t, 4, b.up.Creates())
	})
}

// Keys are scoped per credential; credentials are never stored or logged.
func TestCredentialScope(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		const other = "Bearer sk_live_SECRET_of_account_B"
		const personalKey = "jane.doe@example.com-order"
		a1 := b.send(t, http.MethodPost, "/records", personalKey, token, body1)
		a2 := b.send(t, http.MethodPost, "/records", personalKey, other, body2)
		require.Equal(t, http.StatusCreated, a1.status)
		require.Equal(t, http.StatusCreated, a2.status, "another account's same key is another operation: no 422")
		anon := b.send(t, http.MethodPost, "/records", personalKey, "", body1)
		require.Equal(t, http.StatusCreated, anon.status)
		require.Equal(t, 3, b.up.Creates())
		require.Equal(t, a1.body, b.send(t, http.MethodPost, "/records", personalKey, token, body1).body)
		require.Equal(t, a2.body, b.send(t, http.MethodPost, "/records", personalKey, other, body2).body)
		require.Equal(t, anon.body, b.send(t, http.MethodPost, "/records", personalKey, "", body1).body,
			"callers without credentials share the anonymous scope")
		require.Equal(t, 3, b.up.Creates())

		page, err := b.ledger.List(context.Background(), opledger.ListOptions{})
		require.NoError(t, err)
		require.Len(t, page.Items, 3)
		for _, item := range page.Items {
			op, err := b.ledger.Get(context.Background(), item.Key)
			require.NoError(t, err)
			atts, err := b.ledger.Attempts(context.Background(), item.Key)
			require.NoError(t, err)
			tl, err := b.ledger.Timeline(context.Background(), item.Key)
			require.NoError(t, err)
			stored, err := json.Marshal(map[string]any{"op": op, "payload": string(op.Payload), "attempts": atts, "timeline": tl})
			require.NoError(t, err)
			for _, secret := range []string{"SECRET_of_account", "jane.doe", "Authorization"} {
				require.NotContains(t, string(stored), secret)
			}
		}
		logs := b.logs.String()
		require.Contains(t, logs, "forwarded")
		for _, secret := range []string{"SECRET_of_account", "jane.doe", "order-17"} {
			require.NotContains(t, logs, secret, "logs carry no credential, key or body")
		}
	})
}

// Bodies over the limit are refused with 413 before anything is recorded.
func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.MaxBodyBytes = 64 })
		a := b.send(t, http.MethodPost, "/records", "key-1", token, `{"external_ref":"`+strings.Repeat("x", 100)+`"}`)
		require.Equal(t, http.StatusRequestEntityTooLarge, a.status)
		require.Equal(t, httpapi.ProblemTypeBase+"payload_too_large", a.problem(t).Type)
		require.Equal(t, 0, b.up.Creates())
		require.Equal(t, 0, b.count(t))
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
	})
}

// Unprotected methods pass straight through, without the ledger.
func TestUnprotectedPassThrough(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		for range 2 {
			a := b.send(t, http.MethodGet, "/records?external_ref=order-17", "", token, "")
			require.Equal(t, http.StatusOK, a.status)
			require.Contains(t, string(a.body), `"id":"R1"`)
			require.Empty(t, a.header.Get(proxy.HeaderReplayed))
		}
		require.Equal(t, 2, b.up.Lookups())
		require.Equal(t, 1, b.count(t))
	})
}

// Several upstreams by path prefix, each with its own scope.
func TestPrefixRouting(t *testing.T) {
	t.Parallel()
	crm := fakedest.New(t, fakedest.Options{})
	mail := fakedest.New(t, fakedest.Options{})
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{
		{Name: "crm", Prefix: "/crm/", URL: crm.URL()},
		{Name: "mail", Prefix: "/mail", URL: mail.URL() + "/"},
	}})
	require.NoError(t, err)
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()
	b := &bundle{ledger: l, proxy: p, url: srv.URL}
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/crm/records", "same", token, body1).status)
	require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/mail/records", "same", token, body1).status)
	require.Equal(t, http.StatusNotFound, b.send(t, http.MethodPost, "/other", "same", token, body1).status)
	require.Equal(t, 1, crm.Creates())
	require.Equal(t, 1, mail.Creates())
	require.Equal(t, 2, b.count(t), "the same key at two upstreams is two operations")

	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: "ftp://x"}}})
	require.ErrorContains(t, err, "absolute http:// or https:// URL")
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL(), ProtectedMethods: []string{"GET"}}}})
	require.ErrorContains(t, err, "only POST, PUT, PATCH and DELETE")
	// A credential header no request can carry would put every caller in
	// one scope, where each sees the others' saved answers.
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL(), CredentialHeader: "Bad Header"}}})
	require.EqualError(t, err, `upstream x: credential_header "Bad Header" is not an HTTP header name (RFC 9110 token), so no request could carry it`)
	// Nor may it be a header that carries no caller's credential: every
	// caller sends the same Host or Content-Type, and the proxy itself
	// handles the key, the connection's and the forwarding headers.
	// (The upstream's own idempotency header: TestCompareHeadersRefused.)
	for _, h := range []string{"host", "Content-Type", "Content-Length", "Idempotency-Key", "Connection", "Transfer-Encoding",
		"X-Forwarded-For", "Accept", "Accept-Encoding", "User-Agent", "Expect"} {
		_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL(), CredentialHeader: h}}})
		require.ErrorContains(t, err, "upstream x: credential_header "+http.CanonicalHeaderKey(h)+" carries no caller's credential", h)
	}
	for _, h := range []string{"X-Api-Key", "Cookie", "Proxy-Authorization", "Authorization"} {
		p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL(), CredentialHeader: h}}})
		require.NoError(t, err, h)
		require.NoError(t, p.Close())
	}
	other, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL(), CredentialHeader: "X-Api-Key"}}})
	require.NoError(t, err)
	require.NoError(t, other.Close())
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL()}, {Name: "x", Prefix: "/y", URL: crm.URL()}}})
	require.EqualError(t, err, "upstream x: the name is already used by another upstream: each needs its own",
		"the duplicate is named: the name, not the prefix")
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", Prefix: "/y/", URL: crm.URL()}, {Name: "z", Prefix: "/y/", URL: crm.URL()}}})
	require.EqualError(t, err, "upstream z: prefix /y/ is already used by upstream x")
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", URL: crm.URL()}, {Name: "z", URL: crm.URL()}}})
	require.EqualError(t, err, "upstream z: prefix / is already used by upstream x", "no prefix is /")
	// "/y/" and "/y" route the same paths: the longer took them all.
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", Prefix: "/y/", URL: crm.URL()}, {Name: "z", Prefix: "/y", URL: crm.URL()}}})
	require.EqualError(t, err, "upstream z: prefix /y routes the same paths as upstream x's prefix /y/: with or without the trailing slash, it is one prefix")
	// Paths are routed decoded: an escape in a prefix would never match.
	_, err = proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "x", Prefix: "/a%2Fb/", URL: crm.URL()}}})
	require.EqualError(t, err, `upstream x: prefix "/a%2Fb/" holds a percent-escape: write its segments as they read decoded`)
}

// The saved answer is replayed whole, but shown (API, CLI, logs) with its
// body and its Set-Cookie masked, as the request's body is: an upstream
// that echoes personal data or opens a session must not leak either.
func TestSavedAnswerMasked(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=SECRET-SESSION-123; HttpOnly")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"C1","echo":%s}`, body)
	}))
	defer api.Close()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{{Name: "crm", URL: api.URL}}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer p.Close()
	srv := httptest.NewServer(p)
	defer srv.Close()
	b := &bundle{ledger: l, proxy: p, url: srv.URL}

	const body = `{"email":"jane@example.invalid"}`
	first := b.send(t, http.MethodPost, "/contacts", "k1", token, body)
	require.Equal(t, http.StatusCreated, first.status)
	again := b.send(t, http.MethodPost, "/contacts", "k1", token, body)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	require.Equal(t, first.body, again.body, "replayed whole")
	require.Equal(t, "session=SECRET-SESSION-123; HttpOnly", again.header.Get("Set-Cookie"))

	op := b.only(t)
	shown, err := json.Marshal(op)
	require.NoError(t, err)
	require.NotContains(t, string(shown), "SECRET-SESSION")
	require.NotContains(t, string(shown), "jane@example.invalid")
	require.NotContains(t, string(shown), base64.StdEncoding.EncodeToString(first.body), "the saved body, as stored")
	var view struct {
		Response struct {
			Status int                        `json:"status"`
			Body   string                     `json:"body"`
			Header map[string]json.RawMessage `json:"header"`
		} `json:"response"`
	}
	require.NoError(t, json.Unmarshal(shown, &view))
	require.Equal(t, http.StatusCreated, view.Response.Status, "what is not sensitive is shown")
	require.Equal(t, opledger.Mask, view.Response.Body)
	require.JSONEq(t, `"***"`, string(view.Response.Header["Set-Cookie"]))
	require.JSONEq(t, `["application/json"]`, string(view.Response.Header["Content-Type"]))
}

func ExampleNew() {
	// An API without idempotency support.
	var creates int
	var mu sync.Mutex
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		creates++
		n := creates
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"INV-%d"}`, n)
	}))
	defer api.Close()

	dir, _ := os.MkdirTemp("", "proxy-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(dir, "ledger.db"), opledger.Options{})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	p, err := proxy.New(l, proxy.Config{
		Upstreams: []proxy.Upstream{{Name: "billing", URL: api.URL}},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/invoices", strings.NewReader(`{"amount":120}`))
		req.Header.Set("Idempotency-Key", "invoice-2026-0042")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("invoices created:", creates)
	// Output:
	// 201 {"id":"INV-1"} replayed: false
	// 201 {"id":"INV-1"} replayed: true
	// invoices created: 1
}

// A configured credential header scopes the keys instead of Authorization.
func TestCredentialHeaderScope(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.CredentialHeader = "X-Api-Key" })
		send := func(apiKey, auth string) answer {
			return b.sendWith(t, http.MethodPost, "/records",
				http.Header{"Idempotency-Key": {"k"}, "X-Api-Key": {apiKey}, "Authorization": {auth}}, body1)
		}
		require.Empty(t, send("key-A", "Bearer one").header.Get(proxy.HeaderReplayed))
		require.Equal(t, "true", send("key-A", "Bearer two").header.Get(proxy.HeaderReplayed), "Authorization does not scope here")
		require.Empty(t, send("key-B", "Bearer one").header.Get(proxy.HeaderReplayed), "another X-Api-Key is another scope")
		require.Equal(t, 2, b.up.Creates())
		require.Equal(t, "key-B", b.up.CreateHeaders()[1].Get("X-Api-Key"), "forwarded untouched")
	})
}

// An answer over max_response_bytes reaches the first caller whole and is
// replayed without its body, marked.
func TestLargeAnswerSavedWithoutBody(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, _ *fakedest.Server) { u.MaxResponseBytes = 10 })
		first := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusCreated, first.status)
		require.JSONEq(t, `{"id":"R1","external_ref":"order-17","amount":120}`, string(first.body))
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusCreated, again.status)
		require.Equal(t, "true", again.header.Get(proxy.HeaderBodyOmitted))
		require.Empty(t, again.body)
		require.Equal(t, 1, b.up.Creates())
		require.Equal(t, opledger.StateSucceeded, b.only(t).State)
	})
}

// An upstream that refuses the connection never got the request: 502,
// pending, and a repeat may forward again.
func TestUnreachableUpstreamIsRetryable(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, func(u *proxy.Upstream, up *fakedest.Server) {
			dead := httptest.NewServer(http.NotFoundHandler())
			u.URL = dead.URL
			dead.Close()
		})
		for attempt := 1; attempt <= 2; attempt++ {
			a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
			require.Equal(t, http.StatusBadGateway, a.status)
			p := a.problem(t)
			require.Equal(t, httpapi.ProblemTypeBase+"upstream_unreachable", p.Type)
			require.Equal(t, opledger.StatePending, p.State)
			op := b.only(t)
			require.Equal(t, opledger.StatePending, op.State)
			require.Equal(t, attempt, op.AttemptCount, "each repeat is a new attempt")
		}
	})
}

// Once the upstream's idempotency key retention has passed, a lost
// response is held: no re-forward, protected or not.
func TestProtectionExpiredHolds(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{Dedup: true}, func(u *proxy.Upstream, _ *fakedest.Server) {
			u.Idempotency = &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(time.Hour)}
		})
		b.up.Fail(fakedest.LoseResponse)
		require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		b.offset.Store(int64(2 * time.Hour))
		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Held])
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, a.status)
		require.Equal(t, opledger.StateHeld, a.problem(t).State)
		require.Equal(t, 1, b.up.Creates())
	})
}

// A protected re-forward whose window closes before the forward could
// end (the upstream's timeout) is held by the claim: no re-forward, and
// the repeat is told the operation is held. Before, the proxy claimed it
// and forwarded, and the request could reach the upstream after it had
// forgotten the key.
func TestProtectedReforwardTooLateHolds(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{Dedup: true}, func(u *proxy.Upstream, _ *fakedest.Server) {
			u.Idempotency = &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(time.Hour)}
			u.Timeout = destination.Duration(30 * time.Second)
		})
		b.up.Fail(fakedest.LoseResponse)
		require.Equal(t, http.StatusBadGateway, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		require.Equal(t, 1, b.reconcile(t).Decisions[reconciler.Retry])
		require.True(t, b.only(t).Protected)
		b.offset.Store(int64(time.Hour - 10*time.Second)) // 10 s of the window left, a forward may take 30 s

		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
		require.Equal(t, opledger.StateHeld, a.problem(t).State)
		require.Equal(t, 1, b.up.Creates(), "not forwarded again")
		op := b.only(t)
		require.Equal(t, opledger.StateHeld, op.State)
		require.Equal(t, 1, op.AttemptCount)
	})
}

// After retention has compacted the operations, repeats are still not
// forwarded: a success answers with its reference, a decided rejection
// with its state; other content is still refused.
func TestRepeatAfterRetention(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		b.up.Fail(fakedest.Invalid)
		require.Equal(t, http.StatusUnprocessableEntity, b.send(t, http.MethodPost, "/records", "key-2", token, body1).status)

		b.offset.Store(int64(31 * 24 * time.Hour))
		res, err := b.ledger.Compact(context.Background())
		require.NoError(t, err)
		require.Equal(t, 2, res.Tombstoned)

		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		require.Equal(t, "true", a.header.Get(proxy.HeaderReplayed))
		var got struct {
			State          string `json:"state"`
			DestinationRef string `json:"destination_ref"`
			Detail         string `json:"detail"`
		}
		require.NoError(t, json.Unmarshal(a.body, &got))
		require.Equal(t, "succeeded", got.State)
		require.Equal(t, "R1", got.DestinationRef)
		require.Contains(t, got.Detail, "retention period")

		a = b.send(t, http.MethodPost, "/records", "key-2", token, body1)
		require.Equal(t, http.StatusConflict, a.status)
		require.Equal(t, opledger.StateFailed, a.problem(t).State)
		require.Contains(t, a.problem(t).Detail, "(the upstream refused it with a 4xx answer, no longer kept)", "why it failed, not a guess")
		a = b.send(t, http.MethodPost, "/records", "key-1", token, body2)
		require.Equal(t, http.StatusUnprocessableEntity, a.status)
		require.Equal(t, httpapi.ProblemTypeBase+"fingerprint_mismatch", a.problem(t).Type)
		require.Equal(t, 2, b.up.Creates(), "nothing forwarded again")
	})
}

// Run applies retention while it serves: an answer older than the
// retention period is reduced to a tombstone, and the log says so.
func TestRunAppliesRetention(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		require.Equal(t, http.StatusCreated, b.send(t, http.MethodPost, "/records", "key-1", token, body1).status)
		key := b.only(t).Key
		b.offset.Store(int64(31 * 24 * time.Hour))

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.proxy.Run(ctx, ln, time.Second) }()
		// Wait for the log line, not for the tombstone: a stop between
		// the commit and the log line may leave the line out.
		require.Eventually(t, func() bool {
			return strings.Contains(b.logs.String(), "compacted.tombstoned=1")
		}, 30*time.Second, 10*time.Millisecond, "Run compacts at start, and says so")
		cancel()
		require.NoError(t, <-done)
		op, err := b.ledger.Get(context.Background(), key)
		require.NoError(t, err)
		require.True(t, op.Tombstoned)
	})
}

// A JSON body the fingerprint cannot canonicalize is still protected by
// its digest.
func TestUncanonicalJSONBody(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, nil)
	const huge = `{"external_ref":"x","n":1e400}`
	first := b.send(t, http.MethodPost, "/records", "key-1", token, huge)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	again := b.send(t, http.MethodPost, "/records", "key-1", token, huge)
	require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
	require.Equal(t, 1, b.up.Creates())
}

// A forward that outlives its lease (a proxy that hung or died after
// sending) makes the operation uncertain, never pending: repeats get 409.
// The late answer still resolves it, through the fencing rules.
func TestLeaseExpiryDuringForward(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, st testdb.Store) {
		b := setup(t, st, fakedest.Options{}, nil)
		arrived := b.up.Arrivals()
		b.up.Fail(fakedest.Block)
		done := make(chan answer, 1)
		go func() { done <- b.send(t, http.MethodPost, "/records", "key-1", token, body1) }()
		<-arrived
		b.offset.Store(int64(proxy.DefaultTimeout + 2*time.Minute))
		n, err := b.ledger.ExpireLeases(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, opledger.StateUncertain, b.only(t).State, "dispatched: uncertain, never pending")
		a := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, http.StatusConflict, a.status)
		require.Equal(t, opledger.StateUncertain, a.problem(t).State)

		b.up.Release()
		first := <-done
		require.Equal(t, http.StatusCreated, first.status)
		op := b.only(t)
		require.Equal(t, opledger.StateSucceeded, op.State, "the late success resolved the uncertain operation")
		require.Equal(t, "R1", op.DestinationRef)
		again := b.send(t, http.MethodPost, "/records", "key-1", token, body1)
		require.Equal(t, "true", again.header.Get(proxy.HeaderReplayed))
		require.Equal(t, first.body, again.body, "the late answer was saved")
		require.Equal(t, 1, b.up.Creates())
	})
}

// A request still in flight when Run's shutdown timeout ends: Run says
// so, and what becomes of its operation, rather than a bare "context
// deadline exceeded"; the caller is cut off.
func TestRunShutdownTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, nil)
	arrived := b.up.Arrivals()
	b.up.Fail(fakedest.Block)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.proxy.Run(ctx, ln, 100*time.Millisecond) }()
	sent := make(chan error, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/records", strings.NewReader(body1))
		if err != nil {
			sent <- err
			return
		}
		req.Header.Set("Idempotency-Key", "key-1")
		req.Header.Set("Authorization", token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	<-arrived // the upstream holds the answer until Release
	cancel()
	err = <-done
	require.ErrorContains(t, err, "requests were still in flight when the shutdown timeout (100ms) ended")
	require.ErrorContains(t, err, "stays in_progress until its lease ends")
	require.Error(t, <-sent, "the caller was cut off")
	b.up.Release()
}

// The fingerprint the proxy hands to the claim (internal/knownfp) is the
// one the ledger computes for the payload it stores, whether the body is
// kept in the payload or, unable to be canonicalized, left out.
func TestHandedFingerprintIsTheLedgers(t *testing.T) {
	t.Parallel()
	b := setup(t, testdb.Stores()[0], fakedest.Options{}, nil)
	for i, body := range []string{body1, `{"external_ref":"x","n":1e400}`, `not json`} {
		key := "key-" + strconv.Itoa(i)
		a := b.send(t, http.MethodPost, "/records", key, token, body)
		require.Contains(t, []int{http.StatusCreated, http.StatusBadRequest}, a.status, "forwarded: %s", a.body)
		op, err := b.ledger.Get(context.Background(), a.header.Get(proxy.HeaderOperation))
		require.NoError(t, err)
		want, err := opledger.Fingerprint(op.Action, op.Destination, op.Payload, op.Version)
		require.NoError(t, err)
		require.Equal(t, want, op.Fingerprint, "body %q", body)
	}
}
