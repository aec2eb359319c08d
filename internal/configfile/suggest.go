package configfile

import (
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// unknownField matches the YAML decoder's message for a field the target
// type does not have.
var unknownField = regexp.MustCompile(`field (\S+) not found in type (\S+)$`)

// suggestFields adds "(did you mean X?)" to each unknown-field message of
// te whose field is a near miss of one the type has (another case, a
// letter dropped, added, changed or two swapped: "destination" for
// "destinations").
func suggestFields(te *yaml.TypeError, root reflect.Type) {
	fields := map[string][]string{}
	collectFields(root, fields)
	for i, msg := range te.Errors {
		m := unknownField.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		if s := nearest(m[1], fields[m[2]]); s != "" {
			te.Errors[i] = msg + " (did you mean " + s + "?)"
		}
	}
}

// collectFields records, under the name the YAML decoder gives each
// struct type reachable from t, the YAML names of its fields.
func collectFields(t reflect.Type, fields map[string][]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	if _, seen := fields[t.String()]; seen {
		return
	}
	fields[t.String()] = nil
	var names []string
	for f := range t.Fields() {
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case name == "-" || !f.IsExported():
			continue
		case strings.Contains(opts, "inline"):
			collectFields(f.Type, fields)
			names = append(names, fields[indirect(f.Type).String()]...)
			continue
		case name == "":
			name = strings.ToLower(f.Name)
		}
		names = append(names, name)
		collectFields(f.Type, fields)
	}
	fields[t.String()] = names
}

func indirect(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// nearest is the one name of names that field, in lower case, spells
// differently or at an edit distance of 1 from (optimal string alignment:
// a swap of neighbours counts once), or "".
func nearest(field string, names []string) string {
	found := ""
	for _, n := range names {
		if d := editDistance(strings.ToLower(field), n); d == 1 || d == 0 && field != n {
			if found != "" {
				return ""
			}
			found = n
		}
	}
	return found
}

// editDistance is the optimal string alignment distance between a and b,
// counted in bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// EditDistance is the optimal string alignment distance between a and b
// (a swap of neighbours counts once), in bytes: for a loader's own "did
// you mean".
func EditDistance(a, b string) int { return editDistance(a, b) }
