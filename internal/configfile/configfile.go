// Package configfile reads the configuration files opledger is given: the
// files of serve --config and proxy --config, and the destinations and
// rules files they name. Read takes at most MaxSize bytes of a regular
// file, so that a mistaken path (/dev/zero, a FIFO, a huge log) is refused
// at once instead of filling memory or blocking; DecodeYAML decodes the
// file's one YAML document strictly.
//
// Allowed imports: the standard library, a YAML decoder.
package configfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// MaxSize is the largest configuration file read, in bytes (4 MiB): far
// above any real configuration, far below what could hurt the process.
const MaxSize = 4 << 20

// ErrSeveralDocuments refuses a file that holds a second YAML document
// (after a --- line): opledger would read only the first and silently
// ignore the rest.
var ErrSeveralDocuments = errors.New("only one YAML document is allowed: the file holds more than one")

// Read returns the contents of the file at path, which must be a regular
// file (after following symbolic links) of at most MaxSize bytes. Errors
// name path: "<path>: not a regular file", "<path>: larger than 4 MiB",
// or the error of opening or reading it.
func Read(path string) ([]byte, error) {
	// Stat before opening: opening a FIFO would block until a writer comes.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The file may have been replaced since the Stat.
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, MaxSize>>20)
	}
	return data, nil
}

func notRegular(path string) error { return fmt.Errorf("%s: not a regular file", path) }

// DecodeYAML decodes the YAML document in data into v strictly: a field v
// does not have is an error naming its line, and the field meant when it
// is one letter off ("field destination not found in type T (did you mean
// destinations?)"). A value of the wrong kind is said in plain words,
// with its field ("line 3: upstreams: takes a list …, not a string"; a
// top level that is not a mapping, "the file must be a YAML mapping of
// settings …"), in an error that unwraps to the decoder's *yaml.TypeError.
// UTF-16 text with its byte-order mark is read as its UTF-8; other data
// that is not UTF-8 text is refused with ErrNotUTF8, and a second document, even an empty one, with
// ErrSeveralDocuments. When data holds no document at all (empty, or only
// comments) it returns io.EOF and leaves v as it was. A number with a
// fraction in a whole-number field is a value of the wrong kind too (the
// decoder would cut it).
func DecodeYAML(data []byte, v any) error {
	data, err := utf8Text(data)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if te, ok := errors.AsType[*yaml.TypeError](err); ok {
			suggestFields(te, reflect.TypeOf(v))
			if msg := plainKinds(data, te, reflect.TypeOf(v)); msg != "" {
				return &kindsError{msg, te}
			}
		}
		if tab := tabIndented(data, err); tab != nil {
			return tab
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return ErrSeveralDocuments
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) == nil {
		if msgs := fractions(&doc, reflect.TypeOf(v)); len(msgs) > 0 {
			te := &yaml.TypeError{Errors: msgs}
			if msg := plainKinds(data, te, reflect.TypeOf(v)); msg != "" {
				return &kindsError{msg, te}
			}
			return te
		}
	}
	return nil
}

// syntaxAtTab matches the decoder's errors for a line indented with a
// tab: "cannot start any token" names the tab's line, "violates
// indentation" the line before it, or its own.
var syntaxAtTab = regexp.MustCompile(`^yaml: line (\d+): (found character that cannot start any token|found a tab character that violates indentation)$`)

// tabIndented says a syntax error caused by a tab in a line's indentation
// at the tab's line, that YAML indents with spaces; nil when err is not
// such an error, or no line it may be about is indented with a tab.
func tabIndented(data []byte, err error) error {
	m := syntaxAtTab.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	line, _ := strconv.Atoi(m[1])
	last := line
	if m[2] == "found a tab character that violates indentation" {
		last++
	}
	lines := bytes.Split(data, []byte("\n"))
	for n := line; n <= last && n <= len(lines); n++ {
		text := lines[n-1]
		indent := text[:len(text)-len(bytes.TrimLeft(text, " \t"))]
		if bytes.IndexByte(indent, '\t') >= 0 {
			return fmt.Errorf("yaml: line %d: a tab indents this line, and YAML indents with spaces only: replace the tab with spaces", n)
		}
	}
	return nil
}
