package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// FuzzListQueries sends arbitrary query strings to the two list routes,
// and cursors forged after a real cursor's list prefix (so that what
// follows it, the time and the key, reaches the store), on SQLite and on
// PostgreSQL: every answer is 200 with a page whose next cursor
// continues, or a 4xx problem; never a 5xx.
func FuzzListQueries(f *testing.F) {
	for _, s := range [][2]string{
		{"limit=1", "1|k:1"},
		{"state=held,pending&order=review", "9223372036854775807|k:1"},
		{"owner=%00&destination=%ff", "1|"},
		{"limit=-1&cursor=", "-1|k"},
		{"limit=99999999999999999999", "0|k:1"},
		{"source=forms&status=unmapped&limit=2", "253402300800000000|forms|e-1"},
		{"duplicate_effects=true&order=newest", "1|forms|e|x"},
		{"state=%20held%20", "1|a|b|c"},
	} {
		f.Add(s[0], s[1])
	}
	type target struct {
		name              string
		h                 http.Handler
		opsScope, evScope string
	}
	var targets []target
	for _, st := range testdb.Stores() {
		ctx := context.Background()
		l, err := opledger.Open(ctx, st.NewDSN(f), opledger.Options{SQLiteSynchronousNormal: true})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { l.Close() })
		tl, err := l.WithTenant("fuzz")
		if err != nil {
			f.Fatal(err)
		}
		for i := range 3 {
			if _, _, err := tl.Record(ctx, opledger.Intent{Key: fmt.Sprintf("k:%d", i), Action: "a", Destination: "d",
				Payload: json.RawMessage(`{}`)}); err != nil {
				f.Fatal(err)
			}
			if _, err := tl.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: fmt.Sprintf("e-%d", i), Type: "t",
				Payload: json.RawMessage(`{}`)}); err != nil {
				f.Fatal(err)
			}
		}
		h, err := httpapi.New(l, httpapi.Options{Auth: staticAuth{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			f.Fatal(err)
		}
		tg := target{name: st.Name, h: h}
		// The prefix of each list's cursors: its scope.
		for _, c := range []struct {
			path  string
			scope *string
		}{{"/v1/operations", &tg.opsScope}, {"/v1/events", &tg.evScope}} {
			_, body := listGet(f, h, c.path, "limit=1")
			var page struct {
				NextCursor string `json:"next_cursor"`
			}
			_ = json.Unmarshal(body, &page)
			raw, err := base64.RawURLEncoding.DecodeString(page.NextCursor)
			scope, _, ok := strings.Cut(string(raw), "|")
			if err != nil || !ok {
				f.Fatalf("%s: cursor %q", c.path, page.NextCursor)
			}
			*c.scope = scope
		}
		targets = append(targets, tg)
	}
	f.Fuzz(func(t *testing.T, query, cursorTail string) {
		for _, tg := range targets {
			for _, c := range []struct{ path, scope string }{{"/v1/operations", tg.opsScope}, {"/v1/events", tg.evScope}} {
				forged := "limit=1&cursor=" + url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(c.scope+"|"+cursorTail)))
				for _, q := range []string{query, forged} {
					status, body := listGet(t, tg.h, c.path, q)
					if status >= 500 {
						t.Fatalf("%s: GET %s?%s: %d %s", tg.name, c.path, q, status, body)
					}
					if status != http.StatusOK {
						continue
					}
					var page struct {
						NextCursor string `json:"next_cursor"`
					}
					if err := json.Unmarshal(body, &page); err != nil {
						t.Fatalf("%s: GET %s?%s: %v: %s", tg.name, c.path, q, err, body)
					}
					if page.NextCursor == "" {
						continue
					}
					values, err := url.ParseQuery(q)
					if err != nil {
						t.Fatalf("%s: a malformed query %q was answered", tg.name, q)
					}
					values.Set("cursor", page.NextCursor)
					if status, body := listGet(t, tg.h, c.path, values.Encode()); status != http.StatusOK {
						t.Fatalf("%s: the next page of GET %s?%s: %d %s", tg.name, c.path, q, status, body)
					}
				}
			}
		}
	})
}

// listGet sends GET path?query to h and returns the status and body; a
// 4xx must be a problem document.
func listGet(t testing.TB, h http.Handler, path, query string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://opledger.test"+path, nil)
	req.URL.RawQuery = query
	req.Header.Set("Authorization", "Bearer fuzz")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code >= 400 && rec.Code < 500 && rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("GET %s?%s: %d without problem JSON: %s", path, query, rec.Code, rec.Body.String())
	}
	return rec.Code, rec.Body.Bytes()
}
