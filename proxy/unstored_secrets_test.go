package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// A reference the upstream makes of a value of the request that the
// payload does not hold on its own — a query value, a path segment that
// reads as data, a value of a form or text body (only a JSON body is
// kept), a value or member name of a JSON body the fingerprint cannot
// canonicalize — is shown masked, in the operation,
// its attempts and its timeline, as one made of a JSON body's value is;
// the ledger keeps it, and a repeat gets the upstream's answer.
func TestRefOfUnstoredRequestValueMasked(t *testing.T) {
	t.Parallel()
	const secret = "kim.secret@example.com"
	cases := []struct {
		name, target, contentType, body string
	}{
		{"query", "/customers?email=" + url.QueryEscape(secret) + "&plan=basic", "application/json", `{"plan":"basic"}`},
		{"form body", "/customers", "application/x-www-form-urlencoded", "plan=basic&email=" + url.QueryEscape(secret)},
		{"text body", "/customers", "text/plain", secret},
		{"JSON body not canonical", "/customers", "application/json", `{"email":"` + secret + `","n":1e99999999999}`},
		{"JSON body member name", "/customers", "application/json", `{"to":{"` + secret + `":"cc"},"n":1e99999999999}`},
		{"path segment", "/customers/" + secret + "/subscriptions", "application/json", `{"plan":"basic"}`},
	}
	eachStore(t, func(t *testing.T, st testdb.Store) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusCreated)
					// The upstream names its record after the address, wherever it came.
					if strings.Contains(string(body), url.QueryEscape(secret)) || strings.Contains(string(body), secret) ||
						r.URL.Query().Get("email") == secret || strings.Contains(r.URL.Path, secret) {
						fmt.Fprintf(w, `{"id":%q}`, "cus-"+secret)
						return
					}
					fmt.Fprint(w, `{"id":"cus-unknown"}`)
				}))
				t.Cleanup(up.Close)
				b := proxyOn(t, openLedger(t, st), proxy.Upstream{Name: "crm", URL: up.URL})
				h := http.Header{"Content-Type": {c.contentType}, "Idempotency-Key": {"k-1"}}
				first := b.sendWith(t, http.MethodPost, c.target, h, c.body)
				require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
				require.Contains(t, string(first.body), secret, "the caller gets the upstream's answer")

				op := b.only(t)
				require.Equal(t, "cus-"+secret, op.DestinationRef, "the ledger keeps the real reference")
				shown, err := json.Marshal(op)
				require.NoError(t, err)
				require.NotContains(t, string(shown), secret, "the operation as shown")
				ctx := context.Background()
				attempts, err := b.ledger.Attempts(ctx, op.Key)
				require.NoError(t, err)
				for _, a := range op.MaskedAttempts(attempts) {
					require.NotContains(t, a.DestinationRef, secret, "an attempt as shown")
				}
				timeline, err := b.ledger.Timeline(ctx, op.Key)
				require.NoError(t, err)
				for _, e := range timeline {
					require.NotContains(t, e.Evidence, secret, "the timeline")
				}
				page, err := b.ledger.List(ctx, opledger.ListOptions{})
				require.NoError(t, err)
				listed, err := json.Marshal(page)
				require.NoError(t, err)
				require.NotContains(t, string(listed), secret, "the list")

				again := b.sendWith(t, http.MethodPost, c.target, h, c.body)
				require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
				require.Equal(t, string(first.body), string(again.body), "a repeat is replayed whole")
			})
		}
	})
}
