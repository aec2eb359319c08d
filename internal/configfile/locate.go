package configfile

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML decoder reports a value of the wrong kind as "line 6: cannot
// unmarshal !!str `five` into int": a line, no field, and a Go type.
// ParseWrongKind reads such a message, and ValuesOn and Values.Deepest
// find the value it is about in the document, so that a loader can say
// it by its field, in its own words.

// Located is a value of a YAML document.
type Located struct {
	Node *yaml.Node
	// Path leads to it from the top of the document: mapping keys and
	// list indexes ("upstreams", "0", "url").
	Path []string
	// Line is its key's line, or its own in a list.
	Line int
}

// Values are the values of a document on some of its lines, by line.
type Values map[int][]*Located

// ValuesOn collects the values of the document root on the given lines,
// in one pass however many lines are asked for.
func ValuesOn(root *yaml.Node, lines map[int]bool) Values {
	found := Values{}
	var walk func(n *yaml.Node, path []string, line int)
	walk = func(n *yaml.Node, path []string, line int) {
		if n.Kind != yaml.DocumentNode && lines[n.Line] {
			found[n.Line] = append(found[n.Line], &Located{Node: n, Path: slices.Clone(path), Line: line})
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path, c.Line)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], append(path, n.Content[i].Value), n.Content[i].Line)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, append(path, strconv.Itoa(i)), c.Line)
			}
		}
	}
	walk(root, nil, 0)
	return found
}

// Deepest returns the deepest value on line that match accepts, or nil.
// The deepest: a list or mapping starts on the line of its first entry,
// which may be the value meant ("- name: [crm]" starts a list of
// entries, an entry and a list). It is nil too when another value match
// accepts is beside it rather than above it ({a: [x], b: [y]}): which
// one is meant cannot be told, and the decoder's own words are better
// than a field named wrongly.
func (v Values) Deepest(line int, match func(*yaml.Node) bool) *Located {
	var at *Located
	var matched []*Located
	for _, c := range v[line] {
		if match(c.Node) {
			matched = append(matched, c)
			if at == nil || len(c.Path) > len(at.Path) {
				at = c
			}
		}
	}
	for _, c := range matched {
		if len(c.Path) > len(at.Path) || !slices.Equal(c.Path, at.Path[:len(c.Path)]) {
			return nil
		}
	}
	return at
}

// WrongKind is the decoder's message for a value of the wrong kind, read.
type WrongKind struct {
	Line int
	// Tag is the value's YAML tag ("!!str").
	Tag string
	// Shown is the value as the message shows it: cut to 7 bytes and
	// "..." past 10; "" for a mapping or a list.
	Shown string
	// GoType is the Go type it could not fill ("int", "[]string").
	GoType string
}

// wrongKind is the decoder's message for a value of the wrong kind.
var wrongKind = regexp.MustCompile("^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")

// ParseWrongKind reads msg, one of a *yaml.TypeError's messages; false for
// a message of another kind (an unknown field).
func ParseWrongKind(msg string) (WrongKind, bool) {
	m := wrongKind.FindStringSubmatch(msg)
	if m == nil {
		return WrongKind{}, false
	}
	line, _ := strconv.Atoi(m[1])
	return WrongKind{Line: line, Tag: m[2], Shown: m[3], GoType: m[4]}, true
}

// Matches reports whether n can be the value k is about: its tag, and its
// value as k shows it.
func (k WrongKind) Matches(n *yaml.Node) bool {
	switch {
	case n.ShortTag() != k.Tag:
		return false
	case k.Tag == "!!map" || k.Tag == "!!seq":
		return true
	case len(k.Shown) == 10 && strings.HasSuffix(k.Shown, "..."):
		return strings.HasPrefix(n.Value, k.Shown[:7])
	}
	return n.Value == k.Shown
}

// InvalidValue is the error an UnmarshalYAML method returns for the value
// n when its type refuses it (a duration without a unit), msg saying
// why: a *yaml.TypeError, with which the decoder goes on and reports the
// file's other mistakes too (an unknown field after it), where any other
// error would stop it there. DecodeYAML says it by its field ("line 4:
// upstreams.0.timeout: duration "30" needs a unit, e.g. 30s"); a loader
// of its own reads it with ParseInvalid. Decoded by yaml alone, it reads
// "line 4, column 14: duration "30" needs a unit, e.g. 30s".
func InvalidValue(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{"line " + strconv.Itoa(n.Line) + ", column " + strconv.Itoa(n.Column) + ": " + msg}}
}

// Invalid is a message of InvalidValue, read.
type Invalid struct {
	Line, Column int
	// Msg says why the value is refused.
	Msg string
}

// invalidValue is InvalidValue's message.
var invalidValue = regexp.MustCompile(`(?s)^line (\d+), column (\d+): (.*)$`)

// ParseInvalid reads msg, one of a *yaml.TypeError's messages; false for
// a message of another kind.
func ParseInvalid(msg string) (Invalid, bool) {
	m := invalidValue.FindStringSubmatch(msg)
	if m == nil {
		return Invalid{}, false
	}
	line, _ := strconv.Atoi(m[1])
	column, _ := strconv.Atoi(m[2])
	return Invalid{Line: line, Column: column, Msg: m[3]}, true
}

// At finds the value v is about among found (which holds the values on
// its line), or nil.
func (v Invalid) At(found Values) *Located {
	return found.Deepest(v.Line, func(n *yaml.Node) bool { return n.Column == v.Column })
}

// said is v by its field, "line 4: upstreams.0.timeout: msg", or by its
// line when its value is not found.
func (v Invalid) said(found Values) string {
	if at := v.At(found); at != nil && len(at.Path) > 0 {
		return fmt.Sprintf("line %d: %s: %s", at.Line, strings.Join(at.Path, "."), v.Msg)
	}
	return fmt.Sprintf("line %d: %s", v.Line, v.Msg)
}
