package destination

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML decoder reports a value of the wrong kind as "line 6: cannot
// unmarshal !!str `five` into int": no field, and a Go type. kindErrors
// finds the value in the file and says it as the other configuration
// errors do, "line 6: destination crm: retry.max_attempts: takes a
// whole number, not "five"".

// kindErrors translates the decoding error err of the destinations file
// data: each value of the wrong kind, and a duration that is not one
// (valueError), named by its field. It returns nil when err holds no such
// error, or when it cannot find the value in the file; the decoder's own
// messages then stand.
func kindErrors(data []byte, err error) error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	if ve, ok := errors.AsType[*valueError](err); ok {
		at := valuesOn(&root, map[int]bool{ve.line: true}).deepest(ve.line, func(n *yaml.Node) bool { return n.Column == ve.column })
		if at == nil {
			return nil
		}
		return errors.New(at.prefix() + ve.msg)
	}
	te, ok := errors.AsType[*yaml.TypeError](err)
	if !ok {
		return nil
	}
	issues := make([][]string, len(te.Errors))
	lines := map[int]bool{}
	for i, msg := range te.Errors {
		if m := typeIssue.FindStringSubmatch(msg); m != nil {
			issues[i] = m
			line, _ := strconv.Atoi(m[1])
			lines[line] = true
		}
	}
	if len(lines) == 0 {
		return nil
	}
	found := valuesOn(&root, lines)
	errs := make([]error, len(te.Errors))
	translated := false
	for i, msg := range te.Errors {
		if e := kindError(found, issues[i]); e != nil {
			errs[i], translated = e, true
		} else {
			errs[i] = errors.New(msg) // an unknown field, say
		}
	}
	if !translated {
		return nil
	}
	return errors.Join(errs...)
}

// typeIssue is the decoder's message for a value of the wrong kind: its
// line, YAML tag, the value (cut to 7 bytes and "..." past 10; none for a
// mapping or a list) and the Go type it could not fill.
var typeIssue = regexp.MustCompile("^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")

// kindError translates one match of typeIssue, or returns nil.
func kindError(found values, m []string) error {
	if m == nil {
		return nil
	}
	line, _ := strconv.Atoi(m[1])
	tag, shown, goType := m[2], m[3], m[4]
	at := found.deepest(line, func(n *yaml.Node) bool { return n.ShortTag() == tag && shownAs(n.Value, shown, tag) })
	if at == nil {
		return nil
	}
	switch {
	case len(at.path) == 0:
		return fmt.Errorf("line %d: the file must be a mapping whose destinations: lists the destinations, not %s: "+
			"write \"destinations:\" on its first line, then one entry per destination beginning with \"- name: …\" (docs/destinations.md)",
			at.line, at.found())
	case len(at.path) == 1 && at.path[0] == "destinations":
		return errors.New(at.prefix() + destinationsNotAList(at))
	}
	return errors.New(at.prefix() + "takes " + takes(goType) + ", not " + at.found())
}

// shownAs reports whether the decoder's shown value stands for value.
func shownAs(value, shown, tag string) bool {
	switch {
	case tag == "!!map" || tag == "!!seq":
		return true
	case len(shown) == 10 && strings.HasSuffix(shown, "..."):
		return strings.HasPrefix(value, shown[:7])
	}
	return value == shown
}

// destinationsNotAList says how the destinations list is written, for a
// destinations: that holds something else.
func destinationsNotAList(at *located) string {
	const shape = "takes a list with one entry per destination, each beginning with \"- name: …\" and its fields indented below it"
	n := at.node
	if n.Kind == yaml.MappingNode && len(n.Content) >= 2 {
		byName := true
		for i := 1; i < len(n.Content); i += 2 {
			byName = byName && n.Content[i].Kind == yaml.MappingNode
		}
		if byName {
			first := n.Content[0].Value
			return fmt.Sprintf("%s, not a mapping of names: write \"- name: %s\" in place of \"%s:\", and the same for each destination (docs/destinations.md)", shape, first, first)
		}
		return shape + ", not a mapping: begin the entry with \"- \", as in \"- name: crm\", and indent its other fields under name (docs/destinations.md)"
	}
	if n.Kind == yaml.ScalarNode && n.Value != "" {
		return fmt.Sprintf("%s, not %s; a line \"destinations: FILE\" belongs in the --config file, which names this one (docs/configuration.md)", shape, at.found())
	}
	return fmt.Sprintf("%s, not %s (docs/destinations.md)", shape, at.found())
}

// takes words what a value of the Go type goType is written as.
func takes(goType string) string {
	t := strings.TrimPrefix(goType, "*")
	switch t {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number"
	case "float32", "float64":
		return "a number"
	case "bool":
		return "true or false"
	case "string":
		return "text"
	}
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list (one \"- item\" per line, or [a, b])"
	case strings.HasPrefix(t, "map["):
		return "a mapping of names to values (one \"Name: value\" per line)"
	case strings.HasPrefix(t, "destination."):
		return "a mapping of its own fields, indented below it"
	}
	return "a value of another kind"
}

// located is a value found in the file.
type located struct {
	node *yaml.Node
	// path leads to it from the top of the document: mapping keys and
	// list indexes ("destinations", "0", "retry", "max_attempts").
	path []string
	// line is its key's line, or its own in a list.
	line int
	// entry is the destinations entry it is in, if any.
	entry *yaml.Node
}

// values are the values of a document on some of its lines, by line.
type values map[int][]*located

// valuesOn collects the values of the document root on the given lines,
// in one pass however many lines are asked for.
func valuesOn(root *yaml.Node, lines map[int]bool) values {
	found := values{}
	entries := destinationNodes(root)
	var walk func(n *yaml.Node, path []string, line int)
	walk = func(n *yaml.Node, path []string, line int) {
		if n.Kind != yaml.DocumentNode && lines[n.Line] {
			at := &located{node: n, path: slices.Clone(path), line: line}
			if len(path) >= 2 && path[0] == "destinations" {
				if i, err := strconv.Atoi(path[1]); err == nil && i < len(entries) {
					at.entry = entries[i]
				}
			}
			found[n.Line] = append(found[n.Line], at)
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

// deepest returns the deepest value on line that match accepts (the
// first of several as deep), or nil. The deepest: a list or mapping
// starts on the line of its first entry, which may be the value meant
// ("name: [crm]" on the line where the list of destinations starts).
func (v values) deepest(line int, match func(*yaml.Node) bool) *located {
	var at *located
	for _, c := range v[line] {
		if match(c.node) && (at == nil || len(c.path) > len(at.path)) {
			at = c
		}
	}
	return at
}

// prefix is "line N: destination NAME: FIELD: " (the form of Load's
// other errors), "line N: destination NAME: " for an entry itself, or
// "line N: FIELD: " outside the destinations list.
func (at *located) prefix() string {
	s := fmt.Sprintf("line %d: ", at.line)
	path := at.path
	if len(path) >= 2 && path[0] == "destinations" {
		i, _ := strconv.Atoi(path[1])
		label := fmt.Sprintf("destination %d", i+1)
		if name := child(at.entry, "name"); name != nil && name.Kind == yaml.ScalarNode && name.Value != "" {
			label = "destination " + name.Value
		}
		s += label + ": "
		path = path[2:]
	}
	if len(path) > 0 {
		s += strings.Join(path, ".") + ": "
	}
	return s
}

// found words the value found: "a mapping", "a list", or the value
// itself, quoted when it is text. A header's value is never repeated.
func (at *located) found() string {
	n := at.node
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if slices.Contains(at.path, "headers") {
		return "that value"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:37] + "..."
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(v)
	}
	return v
}
