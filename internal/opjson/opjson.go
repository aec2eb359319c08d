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

	"github.com/opledger/opledger"
)

// WithFields encodes op and adds extra top-level fields (none of them a
// field of the operation) after its own, in the order of their names. The
// operation's encoding is extended in place rather than decoded and
// encoded again: an outcome's answer is on the hot path of the API.
func WithFields(op *opledger.Operation, extra map[string]any) ([]byte, error) {
	b, err := json.Marshal(op)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, fmt.Errorf("operation encoded as %.20q, not an object", b)
	}
	out := b[:len(b)-1]
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		raw, err := json.Marshal(extra[k])
		if err != nil {
			return nil, err
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
