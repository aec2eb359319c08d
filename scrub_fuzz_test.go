package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/marker"
)

// FuzzScrubbedText has a destination quote a sensitive value, in every
// spelling the docs promise to mask (an e-mail address in any case), in
// its error, and an operator quote it in a hold's reason; the stored
// attempt error, last error and timeline evidence must hold none of
// them.
func FuzzScrubbedText(f *testing.F) {
	for _, s := range []struct{ secret, around string }{
		{"ana@example.invalid", "invalid address "},
		{"émile.müller@example.com", "invalid address "},
		{"kåre.sørensen@example.com", "to "},
		{"Zoë <Lang>", "name "},
		{"a+b c/d", "?q="},
		{"a\ufffdb", "x\xffy"},
		{"a\ufffdb", "a\xffb"},
		{"lookup failed: ", "lookup failed: "},
		{"ready", marker.Exists},
	} {
		f.Add(s.secret, s.around)
	}
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(f.TempDir(), "fuzz.db"), opledger.Options{SQLiteSynchronousNormal: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, secret, around string) {
		if !utf8.ValidString(secret) || len(secret) < 3 || strings.IndexByte(secret, 0) >= 0 {
			return
		}
		payload, err := json.Marshal(map[string]string{"s": secret})
		if err != nil {
			t.Fatal(err)
		}
		spellings := promisedSpellings(secret)
		email := looksLikeAddress(secret)
		var text strings.Builder
		for i, sp := range spellings {
			if email {
				sp = asciiCase(sp, i)
			}
			text.WriteString(around + sp)
		}
		if email {
			text.WriteString(around + unicodeCase(secret, len(spellings)))
		}
		text.WriteString(around)
		key := fmt.Sprintf("fuzz:%d", n.Add(1))
		op, err := l.Do(ctx, opledger.Intent{Key: key, Action: "a", Destination: "d", Payload: payload, SensitiveFields: []string{"s"}},
			func(context.Context, opledger.Call) (opledger.Result, error) {
				return opledger.Result{}, opledger.Uncertain(errors.New(text.String()))
			})
		if op == nil {
			t.Fatalf("Do: %v", err)
		}
		if _, err := l.Hold(ctx, key, "customer said "+text.String()); err != nil && !errors.Is(err, opledger.ErrReasonRequired) {
			t.Fatalf("Hold: %v", err)
		}
		op, err = l.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		stored := []string{op.LastError}
		attempts, err := l.Attempts(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range attempts {
			stored = append(stored, a.Error)
		}
		timeline, err := l.Timeline(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range timeline {
			stored = append(stored, e.Evidence)
		}
		for _, s := range stored {
			// The phrases the reconciler reads back are kept whole.
			for _, p := range marker.Phrases {
				s = strings.ReplaceAll(s, p, "\uE001")
			}
			if l := leaks(s, spellings, email); l != "" || email && foldLeaks(s, secret) {
				t.Fatalf("stored text %q holds %q (or the address in some case)", s, l)
			}
		}
	})
}
