package configfile_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/internal/configfile"
)

// TestRead: a regular file, directly or through a symbolic link, is read
// whole up to MaxSize; anything else, or anything larger, is refused with
// an error naming the path, without reading it.
func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(ok, []byte("a: 1\n"), 0o600))
	link := filepath.Join(dir, "link.yaml")
	require.NoError(t, os.Symlink(ok, link))
	for _, p := range []string{ok, link} {
		data, err := configfile.Read(p)
		require.NoError(t, err, p)
		require.Equal(t, "a: 1\n", string(data))
	}

	// Sparse files: exactly MaxSize is read, one byte more is refused.
	full := filepath.Join(dir, "full.yaml")
	require.NoError(t, os.WriteFile(full, nil, 0o600))
	require.NoError(t, os.Truncate(full, configfile.MaxSize))
	data, err := configfile.Read(full)
	require.NoError(t, err)
	require.Len(t, data, configfile.MaxSize)
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, nil, 0o600))
	require.NoError(t, os.Truncate(big, configfile.MaxSize+1))
	_, err = configfile.Read(big)
	require.EqualError(t, err, big+": larger than 4 MiB")

	_, err = configfile.Read(dir)
	require.EqualError(t, err, dir+": not a regular file")
	_, err = configfile.Read(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, filepath.Join(dir, "missing.yaml"))

}

// TestDecodeYAML: one document, decoded strictly; a second one is
// refused; no document at all is io.EOF.
func TestDecodeYAML(t *testing.T) {
	t.Parallel()
	type doc struct {
		A int `yaml:"a"`
	}
	var d doc
	require.NoError(t, configfile.DecodeYAML([]byte("a: 1\n"), &d))
	require.Equal(t, 1, d.A)
	for _, two := range []string{"a: 1\n---\na: 2\n", "a: 1\n---\n", "a: 1\n---\n[\n"} {
		d = doc{}
		require.ErrorIs(t, configfile.DecodeYAML([]byte(two), &d), configfile.ErrSeveralDocuments, two)
	}
	require.ErrorContains(t, configfile.DecodeYAML([]byte("a: 1\nb: 2\n"), &d), "line 2")
	for _, none := range []string{"", "# only a comment\n"} {
		require.ErrorIs(t, configfile.DecodeYAML([]byte(none), &d), io.EOF, none)
	}
}

// An unknown field one letter off a known one names the known one, at
// any depth; a field near none, or near two ("rles": rules or roles?), is
// only refused.
func TestDecodeYAMLSuggests(t *testing.T) {
	t.Parallel()
	type Retry struct {
		MaxAttempts int `yaml:"max_attempts"`
		Backoff     string
	}
	type Common struct {
		Timeout string `yaml:"timeout"`
	}
	type Dest struct {
		Common `yaml:",inline"`
		Name   string `yaml:"name"`
		Retry  *Retry `yaml:"retry"`
		Hidden string `yaml:"-"`
	}
	type doc struct {
		Destinations []Dest          `yaml:"destinations"`
		Rules        string          `yaml:"rules"`
		Roles        string          `yaml:"roles"`
		ByName       map[string]Dest `yaml:"by_name"`
	}
	for _, c := range []struct{ yaml, want string }{
		{"destination: x\n", "field destination not found in type configfile_test.doc (did you mean destinations?)"},
		{"destinations:\n  - nmae: crm\n", "(did you mean name?)"},
		{"destinations:\n  - retry: {max_attempt: 3}\n", "(did you mean max_attempts?)"},
		{"destinations:\n  - retry: {backof: x}\n", "(did you mean backoff?)"},
		{"destinations:\n  - timeuot: 3s\n", "(did you mean timeout?)"},
		{"by_name:\n  a: {Name: x}\n", "(did you mean name?)"},
	} {
		var d doc
		require.ErrorContains(t, configfile.DecodeYAML([]byte(c.yaml), &d), c.want, c.yaml)
	}
	for _, in := range []string{"rles: x\n", "colour: x\n", "hidden: x\n", "destinations:\n  - hiden: x\n"} {
		var d doc
		err := configfile.DecodeYAML([]byte(in), &d)
		require.ErrorContains(t, err, "not found in type", in)
		require.NotContains(t, err.Error(), "did you mean", in)
	}
}

// TestDecodeYAMLNotUTF8: a file in a legacy code page, or saved as
// UTF-16 without its byte-order mark, is refused as not UTF-8 text,
// saying what it looks like, never decoded into garbled text; UTF-16
// with its byte-order mark (little- or big-endian), and UTF-8 with one,
// are read as the text they hold.
func TestDecodeYAMLNotUTF8(t *testing.T) {
	t.Parallel()
	type doc struct {
		A string `yaml:"a"`
	}
	for in, want := range map[string]string{
		"\xff\xfea\x00:\x00 ":         "the file is not UTF-8 text: it starts with a UTF-16 byte-order mark, but its length is odd: save it as UTF-8",
		"a\x00:\x00 \x001\x00\n\x00":  "the file is not UTF-8 text (UTF-16? it holds NUL bytes): save it as UTF-8",
		"# caf\xc3\xa9\na: caf\xe9\n": "the file is not UTF-8 text (line 2 holds the byte 0xE9, which UTF-8 text does not): save it as UTF-8",
	} {
		var d doc
		err := configfile.DecodeYAML([]byte(in), &d)
		require.ErrorIs(t, err, configfile.ErrNotUTF8, "%q", in)
		require.EqualError(t, err, want, "%q", in)
		require.Empty(t, d.A, "%q: nothing decoded", in)
	}
	for _, in := range []string{
		"\xef\xbb\xbfa: caf\xc3\xa9\n",
		"\xff\xfea\x00:\x00 \x00c\x00a\x00f\x00\xe9\x00\n\x00",
		"\xfe\xff\x00a\x00:\x00 \x00c\x00a\x00f\x00\xe9\x00\n",
	} {
		var d doc
		require.NoError(t, configfile.DecodeYAML([]byte(in), &d), "%q", in)
		require.Equal(t, "café", d.A, "%q", in)
	}
	// What is said of a UTF-16 file is said of its text.
	var d doc
	err := configfile.DecodeYAML([]byte("\xff\xfeu\x00p\x00"), &d)
	require.EqualError(t, err, `the file must be a YAML mapping of settings, one "name: value" per line (got a string)`)
}

// TestDecodeYAMLKinds: a value of the wrong kind is said with its field
// and the kind it takes, in plain words, never with Go's type names; a
// top level that is not a mapping says so. The decoder's own error stays
// underneath, and other messages (an unknown field) are kept.
func TestDecodeYAMLKinds(t *testing.T) {
	t.Parallel()
	type Item struct {
		Name  string `yaml:"name"`
		Count int    `yaml:"count"`
	}
	type Settings struct {
		Items []Item            `yaml:"items"`
		ByKey map[string]string `yaml:"by_key"`
		On    bool              `yaml:"on"`
		Inner *Item             `yaml:"inner"`
	}
	for in, want := range map[string]string{
		"hello\n":                   `the file must be a YAML mapping of settings, one "name: value" per line (got a string)`,
		"- a\n- b\n":                `the file must be a YAML mapping of settings, one "name: value" per line (got a list)`,
		"42\n":                      `the file must be a YAML mapping of settings, one "name: value" per line (got a number)`,
		"items: crm\n":              `line 1: items: takes a list (one "- item" per line, or [a, b]), not a string ("crm")`,
		"by_key: [a]\n":             `line 1: by_key: takes a mapping (one "name: value" per line), not a list`,
		"on: maybe\n":               `line 1: on: takes true or false, not a string ("maybe")`,
		"inner: 3\n":                `line 1: inner: takes a mapping of settings (one "name: value" per line, indented below it), not a number ("3")`,
		"items:\n  - count: lots\n": `line 2: items.0.count: takes a whole number, not a string ("lots")`,
		"items:\n  - name: [x]\n    count: two\n": "line 2: items.0.name: takes text, not a list\n" +
			`line 3: items.0.count: takes a whole number, not a string ("two")`,
		"items:\n  - nmae: x\n    count: two\n": "line 2: field nmae not found in type configfile_test.Item (did you mean name?)\n" +
			`line 3: items.0.count: takes a whole number, not a string ("two")`,
		// The decoder would cut a fraction (1.5 to 1, 0.5 to 0).
		"items:\n  - count: 1.5\n":                  `line 2: items.0.count: takes a whole number, not a number ("1.5")`,
		"inner:\n  count: 0.5\n":                    `line 2: inner.count: takes a whole number, not a number ("0.5")`,
		"items:\n  - count: 1.25\n  - count: 2.5\n": "line 2: items.0.count: takes a whole number, not a number (\"1.25\")\nline 3: items.1.count: takes a whole number, not a number (\"2.5\")",
	} {
		var s Settings
		err := configfile.DecodeYAML([]byte(in), &s)
		require.EqualError(t, err, want, "%q", in)
		_, ok := errors.AsType[*yaml.TypeError](err)
		require.True(t, ok, "%q: the decoder's error underneath", in)
	}
	// A whole number written as one with a fraction of 0 is taken.
	var whole Settings
	require.NoError(t, configfile.DecodeYAML([]byte("items:\n  - count: 2.0\n"), &whole))
	require.Equal(t, 2, whole.Items[0].Count)

	// Two lists side by side on one line: which is meant cannot be told
	// from the decoder's error, so its own words are kept rather than a
	// field named wrongly.
	var s Settings
	err := configfile.DecodeYAML([]byte("inner: {name: [x], count: [y]}\n"), &s)
	require.ErrorContains(t, err, "line 1: cannot unmarshal !!seq into string")
	require.NotContains(t, err.Error(), "inner.name: takes a whole number")
}

// TestDecodeYAMLTabs: a line indented with a tab is refused at its own
// line, saying that YAML indents with spaces: the decoder said "found
// character that cannot start any token", or named the line before the
// tab's ("found a tab character that violates indentation" at line 2
// for a tab on line 3). Tabs elsewhere are left to the decoder.
func TestDecodeYAMLTabs(t *testing.T) {
	t.Parallel()
	const tabbed = ": a tab indents this line, and YAML indents with spaces only: replace the tab with spaces"
	for _, c := range []struct{ yaml, want string }{
		{"webhooks:\n\tstripe: x\n", "yaml: line 2" + tabbed},
		{"a:\n  b: 1\n\tc: 2\n", "yaml: line 3" + tabbed},
		{"destinations:\n  - name: x\n\t  url: y\n", "yaml: line 3" + tabbed},
		{"a:\n \tb: 1\n", "yaml: line 2" + tabbed},
		// Not a tab's doing: said as the decoder says it.
		{"a: @x\n", "yaml: found character that cannot start any token"},
		{"a: |\n  x\n  \ty\nb: @x\n", "yaml: line 4: found character that cannot start any token"},
		{"a: |\n  x\n  \ty\nb:\n  c: 1\n\td: 2\n", "yaml: line 6" + tabbed},
	} {
		var v map[string]any
		require.EqualError(t, configfile.DecodeYAML([]byte(c.yaml), &v), c.want, c.yaml)
	}
	var v map[string]any
	require.NoError(t, configfile.DecodeYAML([]byte("a: 1\t# a tab before a comment\nb: |\n  x\n  \ty\n"), &v))
}
