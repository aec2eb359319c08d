package destination

import (
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// ScanRef reads the same reference as RefOf, which the proxy uses for
// answers it holds whole: both refuse those the ledger cannot store, and
// those the decoder would make up (invalid UTF-8, a lone surrogate).
func TestScanRefAgreesWithRefOf(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{"id":"R1"}`, ` {"id" : "R1"} `, `{"id":12}`, `{"id":-1.5e+3}`, `{"id":true}`, `{"id":false}`,
		`{"id":null}`, `{"id":""}`, `{"id":{}}`, `{"id":[1]}`, `{"ID":"x"}`, `{}`, `[]`, `"R"`, `7`,
		`{"id":"a\"b\\c\u00e9\ud83d\ude00\n"}`, `{"i\u0064":"escaped key"}`, `{"id":"` + strings.Repeat("r", 200) + `"}`,
		`{"id":"` + strings.Repeat("r", 201) + `"}`, `{"id":"` + strings.Repeat(`\u0041`, 200) + `"}`,
		`{"id":"` + strings.Repeat(`\u0041`, 201) + `"}`, `{"id":` + strings.Repeat("9", 201) + `}`,
		`{"id":"x","id":"y"}`, `{"id":"x","id":null}`, `{"a":{"b":1},"a":{"c":2}}`, `{"a":{"b":1},"a":{"b":2}}`,
		`{"a":[{"b":"zero"},{"b":"one"}]}`, `{"a":{"1":"key"}}`, `{"a":[0,1]}`, `{"a/b":{"~":"tilde"}}`,
		`{"id":"x"} {"id":"y"}`, `{"id":"x",}`, `{"id":"x"`, `{"id":01}`, `{"id":1.}`, `{"id":-}`, `{"id":tru}`,
		`{"id":"tab	in"}`, `{"id":"\x"}`, `{"id":"\u12"}`, `not json`, ``, `  `, `{"id":"\xff"}`,
		`[{"id":1}]`, `{"id":1e5}`, `{"id":0}`, `{"id":-0.0E-0}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{"id":"\ufffd"}`, `{"id":"a\uFFFDb�"}`, `{"id":"\\ufffd"}`, `{"id":"\ud83d\ude00"}`,
		`{"id":" "}`, `{"id":"\t \n"}`, `{"id":" R1 "}`,
	}
	// These hold at /id text the ledger refuses (NUL), or that decodes
	// to U+FFFD for what the answer holds (invalid UTF-8, a lone
	// surrogate): neither finds a reference in them.
	unstorable := map[string]bool{"{\"id\":\"\xff\"}": true, `{"id":"a\u0000b"}`: true, `{"id":"\ud800"}`: true,
		`{"id":"x\udc00\ufffd"}`: true, `{"id":"\u0000"}`: true, "{\"id\":\"a\xffb\"}": true}
	for doc := range unstorable {
		docs = append(docs, doc)
	}
	for _, ptr := range []string{"/id", "", "/a/b", "/a/1/b", "/a/1", "/a~1b/~0", "/0/id"} {
		p, err := parsePointer(ptr)
		require.NoError(t, err)
		h := &HTTP{ref: p}
		for _, doc := range docs {
			want, werr := h.RefOf([]byte(doc))
			wantOK := werr == nil && len(want) <= maxRefBytes
			require.False(t, ptr == "/id" && unstorable[doc] && wantOK, "RefOf took %q from %.80q", want, doc)
			if !wantOK {
				want = ""
			}
			got, ok := h.ScanRef(iotest.OneByteReader(strings.NewReader(doc)))
			require.Equal(t, wantOK, ok, "pointer %q, doc %.80q", ptr, doc)
			require.Equal(t, want, got, "pointer %q, doc %.80q", ptr, doc)
		}
	}
}

// Only references the ledger can store are found: a NUL byte, invalid
// UTF-8 or a lone surrogate would make it refuse the whole report.
func TestScanRefOnlyStorable(t *testing.T) {
	t.Parallel()
	p, err := parsePointer("/id")
	require.NoError(t, err)
	h := &HTTP{ref: p}
	for doc, want := range map[string]string{
		`{"id":"a\u0000b"}`: "", "{\"id\":\"a\xffb\"}": "", `{"id":"\ud800x"}`: "", `{"id":"\udfff"}`: "",
		`{"id":"é\u00e9"}`: "éé", `{"id":"\ufffd"}`: "\uFFFD", `{"id":"\\ufffd"}`: `\ufffd`,
		`{"id":"` + strings.Repeat("é", 100) + `"}`:  strings.Repeat("é", 100),
		`{"id":"` + strings.Repeat("é", 100) + `x"}`: "",
		`{"id":"  "}`: "", `{"id":"\r\n"}`: "", `{"id":" R1"}`: " R1",
	} {
		got, ok := h.ScanRef(strings.NewReader(doc))
		require.Equal(t, want != "", ok, "%q", doc)
		require.Equal(t, want, got, "%q", doc)
		require.True(t, utf8.ValidString(got) && !strings.ContainsRune(got, 0))
	}
	// RefOf refuses what the ledger would refuse, with the ledger's reason.
	for doc, reason := range map[string]string{
		`{"id":"` + strings.Repeat("r", 201) + `"}`: "destination_ref is 201 bytes long; at most 200 are allowed",
		`{"id":"a\u0000b"}`:                         "without NUL bytes",
	} {
		_, err := h.RefOf([]byte(doc))
		require.ErrorContains(t, err, "is not a reference the ledger can store")
		require.ErrorContains(t, err, reason)
	}
}
