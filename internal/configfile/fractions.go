package configfile

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fractions returns, in the YAML decoder's own words ("line 4: cannot
// unmarshal !!float `1.5` into int"), each number with a fraction in doc
// that decoding into a value of type t put into a whole-number field: the
// decoder cuts it (1.5 becomes 1, 0.5 becomes 0, which may then mean "the
// default") where a value of another kind is refused.
func fractions(doc *yaml.Node, t reflect.Type) []string {
	var msgs []string
	var walk func(n *yaml.Node, t reflect.Type)
	walk = func(n *yaml.Node, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				walk(c, t)
			}
			return
		}
		if n.Kind == yaml.AliasNode || reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
			return // read by its own code
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" {
				if f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); err == nil && f != math.Trunc(f) {
					shown := n.Value
					if len(shown) > 10 {
						shown = shown[:7] + "..." // as the decoder shows it
					}
					msgs = append(msgs, fmt.Sprintf("line %d: cannot unmarshal !!float `%s` into %s", n.Line, shown, t.String()))
				}
			}
		case reflect.Slice, reflect.Array:
			if n.Kind == yaml.SequenceNode {
				for _, c := range n.Content {
					walk(c, t.Elem())
				}
			}
		case reflect.Map:
			if n.Kind == yaml.MappingNode {
				for i := 1; i < len(n.Content); i += 2 {
					walk(n.Content[i], t.Elem())
				}
			}
		case reflect.Struct:
			if n.Kind == yaml.MappingNode {
				fields := yamlFields(t)
				for i := 0; i+1 < len(n.Content); i += 2 {
					if ft, ok := fields[n.Content[i].Value]; ok {
						walk(n.Content[i+1], ft)
					}
				}
			}
		}
	}
	walk(doc, t)
	return msgs
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// yamlFields are the types of t's fields by the names the YAML decoder
// gives them (the yaml tag's, or the field's in lower case), those of
// inline structs included.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}
