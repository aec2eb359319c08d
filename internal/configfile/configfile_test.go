package configfile_test

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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
