package destination_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
)

// dropped returns the requests d read after the first of their
// connection: those it never answered.
func dropped(d *fakedest.Dropper) []fakedest.Request {
	var out []fakedest.Request
	for _, r := range d.Requests() {
		if r.Dropped {
			out = append(out, r)
		}
	}
	return out
}

// warm sends one request on client so that its connection to d goes
// back to the idle pool, to be reused by the next request.
func warm(t *testing.T, d *fakedest.Dropper, client *http.Client) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/warm", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp, err := destination.SendHTTP(client, req, destination.HTTPPolicy{})
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
}

// A request whose reused connection breaks after the destination read it
// is sent once and is uncertain, whatever net/http would deem replayable:
// no body or an empty one (NoBody), a rewindable one (GetBody), with an
// Idempotency-Key or X-Idempotency-Key header, for any method.
func TestSendHTTPNeverResendsAfterWriting(t *testing.T) {
	t.Parallel()
	type tc struct{ name, method, header, body string }
	var cases []tc
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodGet} {
		for _, h := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
			cases = append(cases,
				tc{m + " no body " + h, m, h, ""},
				tc{m + " body " + h, m, h, `{"a":1}`})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := fakedest.NewDropper(t)
			client := newClient(t)
			warm(t, up, client)

			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body) // sets GetBody
			} else if c.method != http.MethodGet {
				body = strings.NewReader("") // becomes http.NoBody
			}
			req, err := http.NewRequestWithContext(context.Background(), c.method, up.URL()+"/act", body)
			require.NoError(t, err)
			if c.body != "" {
				require.NotNil(t, req.GetBody, "net/http could rewind this body")
			}
			req.Header.Set(c.header, "opl-k1-v1")
			resp, err := destination.SendHTTP(client, req, destination.HTTPPolicy{})
			if resp != nil {
				_ = resp.Body.Close()
			}
			require.Nil(t, resp, "no answer")
			requireOutcome(t, err, opledger.OutcomeUncertain, true)
			got := dropped(up)
			require.Len(t, got, 1, "sent exactly once")
			require.Equal(t, 1, up.Answered(), "never sent again on a new connection")
			require.Equal(t, c.body, got[0].Body)
			require.Equal(t, "opl-k1-v1", got[0].Header.Get(c.header))
			if c.body != "" {
				require.Empty(t, got[0].Header.Get("Transfer-Encoding"), "a body keeps its Content-Length")
				require.Equal(t, "7", got[0].Header.Get("Content-Length"))
			}
		})
	}
}

// A destination declaring an Idempotency-Key header whose body template
// renders nothing: its call is sent once, and the broken connection
// leaves it uncertain.
func TestHTTPCallNeverResent(t *testing.T) {
	t.Parallel()
	up := fakedest.NewDropper(t)
	h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: up.URL() + "/records", Ref: "/id",
		Body:        `{{if false}}nothing{{end}}`,
		Idempotency: &destination.IdempotencyConfig{Header: "Idempotency-Key", Retention: destination.Duration(24 * 3600e9)}})
	op := operation("order:1", `{"name":"Ada"}`)
	res, err := h.Call(context.Background(), call(op))
	require.NoError(t, err, "the first call opens the connection")
	require.Equal(t, "A", res.Ref)

	op2 := operation("order:2", `{"name":"Bob"}`)
	_, err = h.Call(context.Background(), call(op2))
	require.Error(t, err)
	outcome, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, outcome, "error: %v", err)
	got := dropped(up)
	require.Len(t, got, 1, "sent exactly once")
	require.Equal(t, op2.IdempotencyKey(), got[0].Header.Get("Idempotency-Key"))
	require.Equal(t, 1, up.Answered(), "never sent again on a new connection")
}

// A POST without a body and without an idempotency header is not one
// net/http would resend: it keeps "Content-Length: 0" on the wire rather
// than an empty chunked body, which some servers refuse (411).
func TestSendHTTPBodylessPostKeepsContentLength(t *testing.T) {
	t.Parallel()
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		got.Set("X-Transfer-Encoding", strings.Join(r.TransferEncoding, ","))
		got.Set("X-Content-Length", strconv.FormatInt(r.ContentLength, 10))
	}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	resp, err := destination.SendHTTP(srv.Client(), req, destination.HTTPPolicy{})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Empty(t, got.Get("X-Transfer-Encoding"), "not chunked")
	require.Equal(t, "0", got.Get("X-Content-Length"))
}
