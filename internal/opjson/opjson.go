// Package opjson encodes an operation with fields of its own beside it,
// as the API sends an operation with its attempts and timeline, or a
// report's answer with stale_report. The API and the Go client share it,
// so that both encode such a value the same way.
package opjson

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/opledger/opledger"
)

// WithFields encodes op and adds extra top-level fields (none of them a
// field of the operation) after its own, in the order of their names. The
// operation's encoding is extended in place rather than decoded and
// encoded again: an outcome's answer is on the hot path of the API.
func WithFields(op *opledger.Operation, extra map[string]any) ([]byte, error) {
	b, err := encode(op)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("operation encoded as %.20q, not an object", b)
	}
	out := b[:len(b)-1]
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		var raw []byte
		switch v := extra[k].(type) {
		case bool: // stale_report, on every outcome's answer
			raw = strconv.AppendBool(nil, v)
		default:
			if raw, err = json.Marshal(v); err != nil {
				return nil, err
			}
		}
		name, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, name...), ':'), raw...)
	}
	return append(out, '}'), nil
}

// encode is json.Marshal(op), without its second pass: json.Marshal
// compacts what Operation.MarshalJSON returns, which is already compact
// (itself the output of json.Marshal, with its HTML-safe escaping), and
// copies it twice. An error, or a nil op, takes json.Marshal, which says
// what it says.
func encode(op *opledger.Operation) ([]byte, error) {
	if op != nil {
		if b, err := op.MarshalJSON(); err == nil {
			return b, nil
		}
	}
	return json.Marshal(op)
}
