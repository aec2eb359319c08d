package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
)

type staticAuth struct{}

func (staticAuth) Authenticate(context.Context, string) (*opledger.TokenInfo, error) {
	return &opledger.TokenInfo{ID: "tok_fuzz", Tenant: "fuzz", Name: "fuzz"}, nil
}

// FuzzRequests sends arbitrary keys and bodies to every body-taking route
// and fails on a panic or any 5xx: bad input must get a 4xx problem.
func FuzzRequests(f *testing.F) {
	seeds := []struct{ key, body string }{
		{"k1", `{"action":"a","destination":"d","payload":{"x":1}}`},
		{"k1", `{"action":"a","destination":"d","payload":{"x":1},"version":-3}`},
		{"a@b", `{}`},
		{"", `{"action":"a"}`},
		{"k1", `{"worker":"w","lease_seconds":1e308}`},
		{"k1", `{"fencing_token":1,"outcome":"succeeded","destination_ref":"r","response":{"a":[1,2]}}`},
		{"k1", `{"decision":"mark_succeeded","reason":"x","destination_ref":"r"}`},
		{"k1", `{"found":true,"matches":true,"destination_ref":"r","visibility_delay_seconds":-1}`},
		{"k1", `{"version":1,"fingerprint":"x","approver":"a"}`},
		{"k1", `{"payload":null,"version":9223372036854775807}`},
		{"k%2F1", `[[[[[[[[]]]]]]]]`},
		{"k1", "\xff\xfe"},
		{"k1", `{"intent":{"action":"a","destination":"d","payload":"\ud800"}}`},
	}
	for _, s := range seeds {
		f.Add(s.key, s.body)
	}
	l, err := opledger.Open(context.Background(), "sqlite:"+filepath.Join(f.TempDir(), "fuzz.db"), opledger.Options{SQLiteSynchronousNormal: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	h, err := httpapi.New(l, httpapi.Options{Auth: staticAuth{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	paths := []struct{ method, suffix string }{
		{"PUT", ""}, {"GET", ""}, {"POST", "/claim"}, {"POST", "/attempts/01J000000000000000000000AA/dispatch"},
		{"POST", "/attempts/01J000000000000000000000AA/outcome"}, {"POST", "/reconcile"}, {"POST", "/approve"},
		{"POST", "/revise"}, {"POST", "/resolve"},
	}
	f.Fuzz(func(t *testing.T, key, body string) {
		for _, p := range paths {
			target := "/v1/operations/" + url.PathEscape(key) + p.suffix
			req := httptest.NewRequest(p.method, "http://opledger.test"+target, bytes.NewReader([]byte(body)))
			req.Header.Set("Authorization", "Bearer fuzz")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %s with body %q: %d %s", p.method, target, body, rec.Code, rec.Body.String())
			}
			if rec.Code >= 400 && rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%s %s: %d without problem JSON: %s", p.method, target, rec.Code, rec.Body.String())
			}
		}
	})
}
