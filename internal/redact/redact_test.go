package redact

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestDSN: a DSN is shown without any secret the driver would read from
// it: the URL's password, the password and sslpassword query parameters
// (however their keys are spelt), and those written in the keyword form
// inside another part; and repeated without them, or not at all when the
// URL cannot leave one out.
func TestDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, shown, again string }{
		{"postgres://u:S3cret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?sslmode=disable"},
		{"postgres://u@h/db?password=S3cret&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable", "postgres://u@h/db?sslmode=disable"},
		{"postgres://u@127.0.0.1:5432/test?sslpassword=S3cret&sslmode=bogus",
			"postgres://u@127.0.0.1:5432/test?sslpassword=xxxxx&sslmode=bogus", "postgres://u@127.0.0.1:5432/test?sslmode=bogus"},
		{"postgres://u:S3cret@h/db?sslmode=verify-full&sslkey=/k.pem&sslpassword=S3cret&password=S3cret",
			"postgres://u:xxxxx@h/db?sslmode=verify-full&sslkey=/k.pem&sslpassword=xxxxx&password=xxxxx", "postgres://u@h/db?sslmode=verify-full&sslkey=/k.pem"},
		// Spellings the driver decodes to the same key, and a value
		// net/url's Query drops (a ';' in it).
		{"postgres://h/db?ssl%70assword=S3cret", "postgres://h/db?ssl%70assword=xxxxx", "postgres://h/db"},
		{"postgres://h/db?SSLPassword=S3cret", "postgres://h/db?SSLPassword=xxxxx", "postgres://h/db"},
		{"postgres://h/db?sslpassword=S3;cret&x=1", "postgres://h/db?sslpassword=xxxxx&x=1", "postgres://h/db?x=1"},
		// The keyword form pasted into a URL: masked, never repeated.
		{"postgres://h/db?sslmode=require sslpassword=S3cret", "postgres://h/db?sslmode=require sslpassword=xxxxx", ""},
		{"postgres://h/db?sslmode=require%20sslpassword%20=%20S3cret", "postgres://h/db?sslmode=require%20sslpassword%20=%20xxxxx", ""},
		{"postgres://h/db sslpassword='S3 c\\'ret' port=5432", "postgres://h/db%20sslpassword=xxxxx", ""},
		{"postgres://h/db?options=-c%20x=1 password = 'S3 cret'", "postgres://h/db?options=-c%20x=1 password = xxxxx", ""},
		{"mysql://ann:S3cret@db/x?password=S3cret", "mysql://ann:xxxxx@db/x?password=xxxxx", "mysql://ann@db/x"},
		{"postgres://u@h/db?search_path=x", "postgres://u@h/db?search_path=x", "postgres://u@h/db?search_path=x"},
	} {
		u, err := url.Parse(tc.dsn)
		if err != nil {
			t.Fatalf("%s: %v", tc.dsn, err)
		}
		raw := u.RawQuery
		if got := DSN(tc.dsn, u); got != tc.shown {
			t.Errorf("DSN(%q) = %q, want %q", tc.dsn, got, tc.shown)
		}
		if u.RawQuery != raw {
			t.Errorf("DSN(%q) changed its URL", tc.dsn)
		}
		again, ok := DSNWithoutSecrets(tc.dsn, u)
		if again != tc.again || ok != (tc.again != "") {
			t.Errorf("DSNWithoutSecrets(%q) = %q, %v, want %q", tc.dsn, again, ok, tc.again)
		}
	}
}

// TestKeys: an operation key leaves an error whole; a workflow step's key
// takes its workflow's key with it, so the other steps' keys go too.
func TestKeys(t *testing.T) {
	t.Parallel()
	plain := errors.New("claim intake:I17:create: in progress")
	for _, tc := range []struct {
		key  string
		err  error
		want string
	}{
		{"intake:I17:create", plain, "claim <key>: in progress"},
		{"wf:ada/create", errors.New("workflow wf:ada step notify: wf:ada/notify is held; after wf:ada/create"),
			"workflow <workflow> step notify: <workflow>/notify is held; after <key>"},
		{"other", plain, plain.Error()},
		// A short key is replaced where it stands alone, not inside words.
		{"a", errors.New("claim a: lease lost"), "claim <key>: lease lost"},
		{"a", errors.New(`operation "a" failed`), `operation "<key>" failed`},
		{"17", errors.New("claim 17: retry 17 of 170 after 1.17s"), "claim <key>: retry <key> of 170 after 1.17s"},
		{"in", errors.New("key in is in progress"), "key <key> is <key> progress"},
		// The key's neighbours that are key characters but not letters or
		// digits are boundaries: the key goes.
		{"order:1", errors.New("update operation order:1: write conflict (order:1/x)"), "update operation <key>: write conflict (<key>/x)"},
		{"a.", errors.New("a.b, a.c"), "<key>b, <key>c"},
		{"wf:a/b", errors.New("workflow wf:a step b: wf:a/b held; wf:ab untouched"), "workflow <workflow> step b: <key> held; wf:ab untouched"},
	} {
		if got := Keys(tc.key, tc.err); got.Error() != tc.want {
			t.Errorf("Keys(%q, %q) = %q, want %q", tc.key, tc.err, got, tc.want)
		}
	}
	if Keys("other", plain) != plain {
		t.Error("an error without the key is returned as it is")
	}
	if Keys("k", nil) != nil {
		t.Error("nil stays nil")
	}
}

// TestFoldReplace: a text is found in any mix of cases, letters outside
// ASCII too, as strings.EqualFold compares, every time it occurs and
// next to other text; a match may be longer or shorter in bytes than the
// text (U+212A, the Kelvin sign, is three bytes, k one; ſ two, s one;
// U+212B, the Angstrom sign, three, å two), and exactly its bytes are
// replaced.
func TestFoldReplace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, s, want string }{
		{"émile.müller@example.com", "Émile.Müller@Example.com", "*"},
		{"émile.müller@example.com", "to ÉMILE.müller@example.com, cc émile.MÜLLER@EXAMPLE.COM.", "to *, cc *."},
		{"émile.müller@example.com", "<Émile.müller@example.COM><ÉMILE.MÜLLER@EXAMPLE.COM>", "<*><*>"},
		{"Émile.Müller@Example.com", "xémile.müller@example.comy", "x*y"},
		{"émile.müller@example.com", "emile.muller@example.com", "emile.muller@example.com"}, // other letters
		{"émile.müller@example.com", "émile.müller@example.co", "émile.müller@example.co"},
		// The match is longer than the text in bytes (U+212A for k,
		// U+212B for å, ſ for s), or shorter (the other way round).
		{"kåre.sørensen@example.com", "é \u212aåre.Sørensen@Example.com é", "é * é"},
		{"kåre.sørensen@example.com", "é\u212a\u212bRE.\u017fØRENSEN@EXAMPLE.COMé", "é*é"},
		{"\u212aåre.\u017førensen@example.com", "[kåre.sørensen@example.com][KÅRE.SØRENSEN@EXAMPLE.COM]", "[*][*]"},
		// Invalid UTF-8 around a match stays as it was.
		{"ünal@example.com", "\xff\xc3ÜNAL@example.com\xe2\x82", "\xff\xc3*\xe2\x82"},
		// Like strings.EqualFold, an invalid byte reads as U+FFFD.
		{"a\ufffdb@example.com", "(A\xffB@example.com)", "(*)"},
		{"abc", "ab", "ab"},
	} {
		f := NewFold(tc.text)
		if got := f.Replace(tc.s, "*"); got != tc.want {
			t.Errorf("NewFold(%q).Replace(%q) = %q, want %q", tc.text, tc.s, got, tc.want)
		}
		if tc.want != tc.s && !f.MayBeIn(ASCIILower(tc.s)) {
			t.Errorf("NewFold(%q).MayBeIn(ASCIILower(%q)) is false", tc.text, tc.s)
		}
	}
	// MayBeIn rules text out by its longest run of ASCII characters but
	// k and s (here "müller@example.com"'s "ller@example.com").
	if f := NewFold("émile.müller@example.com"); f.MayBeIn("émile.müller@example.org") || !f.MayBeIn("x ller@example.com") {
		t.Error("MayBeIn looks for the wrong run")
	}
	for _, tc := range []struct{ a, b string }{
		{"émile.müller@example.com", "ÉMILE.Müller@EXAMPLE.COM"},
		{"kåre.sørensen@example.com", "\u212aåre.\u017førensen@example.com"},
	} {
		if FoldKey(tc.a) != FoldKey(tc.b) {
			t.Errorf("FoldKey(%q) = %q, FoldKey(%q) = %q", tc.a, FoldKey(tc.a), tc.b, FoldKey(tc.b))
		}
		if f := NewFold(FoldKey(tc.a)); f.Replace(tc.b, "*") != "*" || f.Least() != len(FoldKey(tc.a)) {
			t.Errorf("the Fold of FoldKey(%q) does not find %q", tc.a, tc.b)
		}
	}
}

// FuzzFoldReplace compares Fold.Replace with a search that tries every
// stretch of s beginning at a character with strings.EqualFold.
func FuzzFoldReplace(f *testing.F) {
	for _, s := range []struct{ text, s string }{
		{"émile.müller@example.com", "to Émile.MÜLLER@example.com and émile.müller@EXAMPLE.com"},
		{"kåre.sørensen@example.com", "\u212a\u212bRE.\u017fØRENSEN@EXAMPLE.COM"},
		{"Kelvin", "kelvin KELVIN \u212aelvin"},
		{"ss", "\u017f\u017f\u017f"},
		{"a\ufffdb", "a\xffb A\xc3B"},
		{"aa", "aaa"},
	} {
		f.Add(s.text, s.s)
	}
	f.Fuzz(func(t *testing.T, text, s string) {
		if text == "" || !utf8.ValidString(text) || len(s) > 1<<10 {
			return // bruteReplaceFold takes time in the square of len(s)
		}
		want := bruteReplaceFold(s, text, "\x00")
		f := NewFold(text)
		if got := f.Replace(s, "\x00"); got != want {
			t.Fatalf("NewFold(%q).Replace(%q) = %q, want %q", text, s, got, want)
		}
		if want != s && !f.MayBeIn(ASCIILower(s)) {
			t.Fatalf("NewFold(%q).MayBeIn(ASCIILower(%q)) is false, but it occurs", text, s)
		}
		if got := NewFold(FoldKey(text)).Replace(s, "\x00"); got != want {
			t.Fatalf("the Fold of FoldKey(%q) = %q replaced %q into %q, want %q", text, FoldKey(text), s, got, want)
		}
	})
}

// bruteReplaceFold replaces by with, leftmost first, every stretch of
// whole characters of s that strings.EqualFold finds equal to text.
func bruteReplaceFold(s, text, with string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		_, size := utf8.DecodeRuneInString(s[i:])
		end := i
		for end < len(s) && !strings.EqualFold(s[i:end], text) {
			_, n := utf8.DecodeRuneInString(s[end:])
			end += n
		}
		if end > i && strings.EqualFold(s[i:end], text) {
			b.WriteString(with)
			i = end
			continue
		}
		b.WriteString(s[i : i+size])
		i += size
	}
	return b.String()
}

// TestSecrets: every occurrence of each secret is masked, in any case,
// the longest first; masks side by side read as one.
func TestSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s       string
		secrets []string
		want    string
	}{
		{"Bearer s3cr3t-T0ken", []string{"Bearer s3cr3t-T0ken", "s3cr3t-T0ken"}, "***"},
		{`{"authorization":"bearer S3CR3T-t0ken"}`, []string{"Bearer s3cr3t-T0ken", "s3cr3t-T0ken"}, `{"authorization":"***"}`},
		{"token s3cr3t-T0ken, again s3cr3t-T0kens3cr3t-T0ken", []string{"s3cr3t-T0ken"}, "token ***, again ***"},
		{"nothing here", []string{"s3cr3t-T0ken", ""}, "nothing here"},
		{"", []string{"s3cr3t-T0ken"}, ""},
	} {
		if got := Secrets(tc.s, tc.secrets, "***"); got != tc.want {
			t.Errorf("Secrets(%q, %q) = %q, want %q", tc.s, tc.secrets, got, tc.want)
		}
	}
}

// TestStrayAt: an '@' in the host part as the driver reads it (after
// the first '@' before any '/', up to a '?' or '#') is reported, and so is
// a '?' or '#' before that first '@' (the driver reads across them where
// the URL syntax ends the authority); one '@' ending the userinfo, or an
// '@' of the query after it or after the path, is not.
func TestStrayAt(t *testing.T) {
	for dsn, want := range map[string]bool{
		"postgres://u:p@ss@h/db":                  true,
		"postgresql://u:p@ss@h:5432/db?x=1":       true,
		"postgres://u:p@ss@h":                     true,
		"postgres://u:p@h,h2@x/db":                true,
		"postgres://u:p@ss@h?sslmode=disable":     true,
		"postgres://u:p%40ss@h/db":                false,
		"postgres://u:pass@h/db":                  false,
		"postgres://u:s3cr?et@h/db":               true,
		"postgres://u:s3cr#et@h/db":               true,
		"postgres://h:5432?password=p@secret":     true,
		"postgres://h?password=p@secret&a=b":      true,
		"postgres://u:s3cr%3Fet@h/db":             false,
		"postgres://h:5432/?password=p@secret":    false,
		"postgres://u:p@h?application_name=a@b":   false,
		"postgres://u@h/db?application_name=a@b":  false,
		"postgres://h/db":                         false,
		"postgres://h#frag@x":                     true,
		"postgres://h?a=1#frag":                   false,
		"sqlite:/tmp/a@b@c.db":                    false,
		"host=h password=p@ss@x":                  false,
		"postgres://u:p@h/db?password=p@ss@x&a=b": false,
	} {
		check(t, StrayAt(dsn) == want, "StrayAt(%q) = %v, want %v", dsn, !want, want)
	}
}

func check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
}

// DataName tells data (masked as a member name or path segment) from an
// identifier that names a field (never masked, or every text naming the
// field would read "***").
func TestDataName(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]bool{
		"city": false, "line2": false, "first_name": false, "_x": false, "sendMessage": false, "x-y": false,
		"kim@example.com": true, "12345": true, "2026-12-07": true, "Kim Lee": true, "bot123:AbC": true, "-x": true, "Zoë": true,
	} {
		if got := DataName(name); got != data {
			t.Errorf("DataName(%q) = %v, want %v", name, got, data)
		}
	}
}
