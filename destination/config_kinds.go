package destination

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/internal/configfile"
)

// The YAML decoder reports a value of the wrong kind as "line 6: cannot
// unmarshal !!str `five` into int": no field, and a Go type. kindErrors
// finds the value in the file (configfile.ValuesOn) and says it as the
// other configuration errors do, "line 6: destination crm:
// retry.max_attempts: takes a whole number, not "five"".

// kindErrors translates the decoding error err of the destinations file
// data: each value of the wrong kind, and each duration that is not one
// (configfile.InvalidValue), named by its field; other messages (an
// unknown field) are kept, each on its line. It returns nil when err
// holds no such error, or no value of the wrong kind it can find in the
// file and no refused duration; the decoder's own messages then stand.
func kindErrors(data []byte, err error) error {
	te, ok := errors.AsType[*yaml.TypeError](err)
	if !ok {
		return nil
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	entries := destinationNodes(&root)
	kinds := make([]*configfile.WrongKind, len(te.Errors))
	invalid := make([]*configfile.Invalid, len(te.Errors))
	lines := map[int]bool{}
	for i, msg := range te.Errors {
		if k, ok := configfile.ParseWrongKind(msg); ok {
			kinds[i], lines[k.Line] = &k, true
		} else if v, ok := configfile.ParseInvalid(msg); ok {
			invalid[i], lines[v.Line] = &v, true
		}
	}
	if len(lines) == 0 {
		return nil
	}
	found := configfile.ValuesOn(&root, lines)
	errs := make([]error, len(te.Errors))
	translated := false
	for i, msg := range te.Errors {
		if e := kindError(found, entries, kinds[i]); e != nil {
			errs[i], translated = e, true
		} else if v := invalid[i]; v != nil {
			if at := v.At(found); at != nil {
				errs[i] = errors.New(prefix(at, entries) + v.Msg)
			} else {
				errs[i] = fmt.Errorf("line %d: %s", v.Line, v.Msg)
			}
			translated = true
		} else {
			errs[i] = errors.New(msg) // an unknown field, say
		}
	}
	if !translated {
		return nil
	}
	return errors.Join(errs...)
}

// kindError translates k, or returns nil.
func kindError(found configfile.Values, entries []*yaml.Node, k *configfile.WrongKind) error {
	if k == nil {
		return nil
	}
	at := found.Deepest(k.Line, k.Matches)
	if at == nil {
		return nil
	}
	switch {
	case len(at.Path) == 0:
		return fmt.Errorf("line %d: the file must be a mapping whose destinations: lists the destinations, not %s: "+
			"write \"destinations:\" on its first line, then one entry per destination beginning with \"- name: …\" (docs/destinations.md)",
			at.Line, foundValue(at))
	case len(at.Path) == 1 && at.Path[0] == "destinations":
		return errors.New(prefix(at, entries) + destinationsNotAList(at))
	}
	return errors.New(prefix(at, entries) + "takes " + takes(k.GoType) + ", not " + foundValue(at))
}

// destinationsNotAList says how the destinations list is written, for a
// destinations: that holds something else.
func destinationsNotAList(at *configfile.Located) string {
	const shape = "takes a list with one entry per destination, each beginning with \"- name: …\" and its fields indented below it"
	n := at.Node
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
		return fmt.Sprintf("%s, not %s; a line \"destinations: FILE\" belongs in the --config file, which names this one (docs/configuration.md)", shape, foundValue(at))
	}
	return fmt.Sprintf("%s, not %s (docs/destinations.md)", shape, foundValue(at))
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

// prefix is "line N: destination NAME: FIELD: " (the form of Load's
// other errors), "line N: destination NAME: " for an entry itself, or
// "line N: FIELD: " outside the destinations list; entries are the
// file's destination entries.
func prefix(at *configfile.Located, entries []*yaml.Node) string {
	s := fmt.Sprintf("line %d: ", at.Line)
	path := at.Path
	if len(path) >= 2 && path[0] == "destinations" {
		i, _ := strconv.Atoi(path[1])
		label := fmt.Sprintf("destination %d", i+1)
		if i < len(entries) {
			if name := child(entries[i], "name"); name != nil && name.Kind == yaml.ScalarNode && name.Value != "" {
				label = "destination " + name.Value
			}
		}
		s += label + ": "
		path = path[2:]
	}
	if len(path) > 0 {
		s += strings.Join(path, ".") + ": "
	}
	return s
}

// foundValue words the value found: "a mapping", "a list", or the value
// itself, quoted when it is text. A header's value is never repeated.
func foundValue(at *configfile.Located) string {
	n := at.Node
	if n.Kind != yaml.ScalarNode {
		return configfile.KindOf(n)
	}
	if slices.Contains(at.Path, "headers") {
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
