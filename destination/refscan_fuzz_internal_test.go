package destination

import (
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzScanRef compares ScanRef, which reads an answer as it streams by,
// with RefOf, which decodes it whole: each finds a reference only where
// the other finds the same one (neither takes one the decoder made up,
// U+FFFD for invalid UTF-8 or a lone surrogate).
func FuzzScanRef(f *testing.F) {
	for _, s := range [][2]string{
		{`{"id":"R1"}`, "/id"}, {`{"id":"x"}]`, "/id"}, {`{"id":"x"}}`, "/id"}, {`[{"id":1}]]`, "/0/id"},
		{`{"a":[{"b":"zero"},{"b":"one"}]}`, "/a/1/b"}, {`{"id":"x","id":null}`, "/id"}, {`{"id":-0.0E-0}`, "/id"},
		{`{"id":"\ud800"}`, "/id"}, {"{\"id\":\"\xff\"}", "/id"}, {`{"a~1b":{"~":"t"}}`, "/a~1b/~0"}, {`"R"`, ""},
		{`{"id":"x"} {"id":"y"}`, "/id"}, {`{"id":01}`, "/id"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, doc, ptr string) {
		p, err := parsePointer(ptr)
		if err != nil {
			return
		}
		h := &HTTP{ref: p}
		want, werr := h.RefOf([]byte(doc))
		got, ok := h.ScanRef(iotest.OneByteReader(strings.NewReader(doc)))
		switch {
		case ok && (werr != nil || got != want):
			t.Fatalf("ScanRef found %q, RefOf %q (%v)", got, want, werr)
		case !ok && werr == nil && len(want) <= maxRefBytes:
			t.Fatalf("RefOf found %q, ScanRef none", want)
		}
	})
}
